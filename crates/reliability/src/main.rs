//! `spillway-reliability faults`: every fault × every failure policy, under steady
//! load through a real service on a real Redis; prints the table in
//! `docs/reliability.md`.

use std::time::Duration;

use clap::{Parser, Subcommand};
use spillway_reliability::{Fault, Policy, TABLE_HEADER, Timing, trial};

#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Each fault under steady load, for each failure policy and shadow mode.
    ///
    /// Example: spillway-reliability faults --fault stop --fault proxy-drop --policy closed
    Faults {
        /// Only these faults (default: all): kill, stop, client-pause, debug-sleep,
        /// script-flush, proxy-drop, proxy-delay, proxy-reset.
        #[arg(long = "fault")]
        faults: Vec<Fault>,
        /// Only these policies (default: all): open, closed, local, shadow.
        #[arg(long = "policy")]
        policies: Vec<Policy>,
        /// How long each fault lasts.
        #[arg(long, default_value = "2s", value_parser = humantime_duration)]
        length: Duration,
        /// Requests per second (the limit is 100 per second).
        #[arg(long, default_value_t = 200)]
        rate: u32,
    },
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    spillway_server::settings::duration(s)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // The service's own logs, when asked for (RUST_LOG=warn shows each store failure).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let Command::Faults {
        faults,
        policies,
        length,
        rate,
    } = cli.command;
    let faults = if faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        faults
    };
    let policies = if policies.is_empty() {
        Policy::ALL.to_vec()
    } else {
        policies
    };
    let timing = Timing {
        fault: length,
        rate,
        ..Timing::default()
    };
    println!("{TABLE_HEADER}");
    let mut broken = 0;
    for fault in faults {
        for &policy in &policies {
            let report = trial::run(fault, policy, timing).await?;
            println!("{report}");
            for e in &report.examples {
                eprintln!("  {fault}/{}: {e}", policy.name());
            }
            broken += report.violations;
        }
    }
    anyhow::ensure!(broken == 0, "{broken} answers broke their policy's rule");
    Ok(())
}
