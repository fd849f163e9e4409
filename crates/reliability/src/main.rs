//! `spillway-reliability faults`: every fault × every failure policy, under steady
//! load through a real service on a real Redis; prints the table in
//! `docs/reliability.md`.

// The service's decision future nests the Redis client's futures deeply.
#![recursion_limit = "256"]

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use spillway_redis::RedisStore;
use spillway_reliability::fault::{Transport, root_faults_unavailable};
use spillway_reliability::hostile::{self, CONFIG_HEADER, HOSTILE_HEADER, SLOW_HEADER};
use spillway_reliability::overload::{self, OVERLOAD_HEADER, Overload};
use spillway_reliability::{Fault, Policy, TABLE_HEADER, Timing, skew, soak, trial};
use spillway_testkit::redis::{RedisServer, unique_prefix};

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
    /// Example: spillway-reliability faults --fault stop --fault proxy-drop --policy closed --tls
    Faults(Matrix),
    /// Open-loop overload on one key for each algorithm, every admission checked
    /// against what the algorithm promises in any window.
    ///
    /// Example: spillway-reliability overload --store redis+cluster://127.0.0.1:7000 --length 1m
    Overload {
        /// A Redis URL (default: a redis-server of its own on a free port).
        #[arg(long)]
        store: Option<String>,
        #[arg(long, default_value_t = 1000)]
        limit: u64,
        #[arg(long, default_value = "10s", value_parser = humantime_duration)]
        window: Duration,
        /// Load as a multiple of the limit's rate.
        #[arg(long, default_value_t = 3)]
        multiplier: u32,
        #[arg(long, default_value = "30s", value_parser = humantime_duration)]
        length: Duration,
    },
    /// Two services whose clocks disagree, sharing one Redis in server-time mode: the
    /// admissions of both together against the limit.
    ///
    /// Example: spillway-reliability skew --offset 30s --length 20s
    Skew {
        /// A Redis URL (default: a redis-server of its own on a free port).
        #[arg(long)]
        store: Option<String>,
        /// One service runs this far ahead of the real time, the other this far behind.
        #[arg(long, default_value = "5s", value_parser = humantime_duration)]
        offset: Duration,
        #[arg(long, default_value = "10s", value_parser = humantime_duration)]
        length: Duration,
    },
    /// The Rate Limit Quota Service's streams under each single-server fault: no share
    /// granted without Redis, the shares held never past the limit, each stream's
    /// share back after the fault, a stream opened in place of a dropped one served.
    ///
    /// Example: spillway-reliability rlqs --fault stop --tls
    Rlqs {
        /// Only these faults (default: every single-server fault but iptables-drop).
        #[arg(long = "fault")]
        faults: Vec<Fault>,
        /// Over TLS, client certificates required.
        #[arg(long)]
        tls: bool,
    },
    /// Every malformed request class on /v1/check, /json and gRPC, against a service
    /// on a Redis of its own: each must be refused with a 4xx (INVALID_ARGUMENT), no
    /// panic, no 5xx, no store call; a valid control request must reach the store.
    ///
    /// Example: spillway-reliability hostile
    Hostile,
    /// Native rules on Redis at an everyday rate for minutes (a `gcra` 100 per second and
    /// a `sliding_window` 100,000 per hour of precision 60 on each request, users drawn
    /// at random), Redis frozen once in the middle: a row per interval of latency, store
    /// timeouts, breaker openings, fallbacks, memory and open files.
    ///
    /// Example: spillway-reliability soak --rate 3000 --length 20m --freeze 5s --every 1m
    Soak(soak::Soak),
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    spillway_server::config::value::duration(s)
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

/// Which trials `faults` runs.
#[derive(Args, Debug)]
struct Matrix {
    /// Only these faults (default: all): kill, stop, client-pause, debug-sleep,
    /// script-flush, proxy-drop, proxy-delay, proxy-reset on one server;
    /// iptables-drop (root only, in a network namespace of its own; skipped
    /// elsewhere); failover, master-kill, reshard on a 6-node Redis Cluster of the
    /// run's own.
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
    /// Over TLS: servers requiring client certificates from a CA of the run's own (a
    /// Cluster's bus and replication too).
    #[arg(long)]
    tls: bool,
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Faults(matrix) => faults_matrix(matrix).await,
        Command::Overload {
            store,
            limit,
            window,
            multiplier,
            length,
        } => {
            let o = Overload {
                limit,
                window,
                multiplier,
                length,
            };
            overload_all(store, o).await
        }
        Command::Hostile => hostile_table().await,
        Command::Soak(soak) => {
            println!("{}", soak::run(soak).await?);
            Ok(())
        }
        Command::Rlqs { faults, tls } => rlqs_table(faults, tls).await,
        Command::Skew {
            store,
            offset,
            length,
        } => {
            let own = store.is_none().then(RedisServer::start);
            let url =
                store.unwrap_or_else(|| own.as_ref().map(RedisServer::url).unwrap_or_default());
            let r = skew::run(&url, offset, length).await?;
            println!(
                "two services {offset:?} ahead and behind, {} sent, {} admitted, at most {} \
                 certainly in one {:?} window (limit {}): {} past the limit",
                r.sent,
                r.admitted,
                r.certain_most,
                trial::WINDOW,
                trial::LIMIT,
                r.violations()
            );
            anyhow::ensure!(
                r.violations() == 0,
                "the services together admitted past the limit"
            );
            Ok(())
        }
    }
}

async fn rlqs_table(faults: Vec<Fault>, tls: bool) -> anyhow::Result<()> {
    use spillway_reliability::rlqs::{self, RLQS_HEADER};
    let faults = if faults.is_empty() {
        Fault::ALL
            .into_iter()
            .filter(|f| !f.on_cluster() && !f.needs_root())
            .collect()
    } else {
        faults
    };
    let transport = if tls {
        Transport::Tls
    } else {
        Transport::Plain
    };
    println!("{RLQS_HEADER}");
    let mut broken = 0;
    for fault in faults {
        let report = rlqs::run(fault, transport).await?;
        println!("{report}");
        if report.violations > 0 {
            eprintln!("{fault}: {:?}", report.examples);
            broken += 1;
        }
    }
    anyhow::ensure!(broken == 0, "{broken} trials broke a promise");
    Ok(())
}

async fn hostile_table() -> anyhow::Result<()> {
    let (outcomes, _) = hostile::run().await?;
    println!("{HOSTILE_HEADER}");
    for o in &outcomes {
        println!("{o}");
    }
    let (slow, answer, latency) = hostile::slow_clients(1000, Duration::from_secs(5)).await?;
    println!("\n{SLOW_HEADER}");
    for r in &slow {
        println!("{r}");
    }
    println!(
        "\nwith all {} held: a valid request answered {answer:?} in {:.1} ms",
        slow.iter().map(|r| r.held).sum::<usize>(),
        latency.as_secs_f64() * 1e3
    );
    let tls_timeout = Duration::from_secs(5);
    let tls = hostile::tls_clients(tls_timeout).await?;
    println!("\n{}", hostile::TLS_HEADER);
    for r in &tls {
        println!("{r}");
    }
    let config = hostile::run_config()?;
    println!("\n{CONFIG_HEADER}");
    for c in &config {
        println!("{c}");
    }
    let mut h2 = hostile::h2_clients(&hostile::H2Case::all(20_000), false).await?;
    h2.extend(hostile::h2_clients(&hostile::H2Case::all(20_000), true).await?);
    println!("\n{}", hostile::H2_HEADER);
    for r in &h2 {
        println!("{r}");
    }
    let xds = hostile::xds_pushes().await?;
    println!("\n{}", hostile::XDS_HEADER);
    for x in &xds {
        println!("{x}");
    }
    let lies = hostile::lies().await?;
    println!("\n{}", hostile::LIES_HEADER);
    for l in &lies {
        println!("{l}");
    }
    let wrong = outcomes.iter().filter(|o| !o.ok()).count()
        + config.iter().filter(|c| !c.ok()).count()
        + slow.iter().filter(|r| r.closed < r.held).count()
        + tls.iter().filter(|r| !r.ok(tls_timeout)).count()
        + lies.iter().filter(|l| !l.ok()).count()
        + h2.iter().filter(|r| !r.ok()).count()
        + xds.iter().filter(|x| !x.ok()).count();
    let cases = outcomes.len()
        + slow.len()
        + tls.len()
        + config.len()
        + h2.len()
        + xds.len()
        + 3 * lies.len();
    println!("\n{cases} hostile cases");
    let faults = outcomes.iter().filter(|o| o.server_fault).count();
    let panics = hostile::panics_so_far();
    let calls: u64 = outcomes
        .iter()
        .filter(|o| !o.valid)
        .map(|o| o.store_calls)
        .sum();
    println!(
        "\n{} requests: {panics} panics, {faults} server faults, {calls} store calls for \
         refused requests, {wrong} not as they must",
        outcomes.len()
    );
    anyhow::ensure!(
        wrong == 0 && panics == 0,
        "hostile input was not refused cleanly"
    );
    Ok(())
}

async fn faults_matrix(matrix: Matrix) -> anyhow::Result<()> {
    let faults = if matrix.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        matrix.faults.clone()
    };
    let policies = if matrix.policies.is_empty() {
        Policy::ALL.to_vec()
    } else {
        matrix.policies.clone()
    };
    let timing = Timing {
        fault: matrix.length,
        rate: matrix.rate,
        ..Timing::default()
    };
    let transport = if matrix.tls {
        Transport::Tls
    } else {
        Transport::Plain
    };
    let inside = std::env::var_os(IN_NETNS).is_some();
    if !inside {
        println!("{TABLE_HEADER}");
    }
    let mut broken = 0;
    for fault in faults {
        if fault.needs_root() && !inside {
            match root_faults_unavailable() {
                Some(why) => eprintln!(
                    "skipped {fault}: it needs root, iptables and `unshare -n` (it runs in a \
                     network namespace of its own): {why}"
                ),
                None => in_private_netns(fault, &policies, &matrix)?,
            }
            continue;
        }
        for &policy in &policies {
            let report = trial::run(fault, policy, transport, timing).await?;
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

/// Set in the child that runs a root-only fault inside its own network namespace.
const IN_NETNS: &str = "SPILLWAY_RELIABILITY_IN_NETNS";

/// Runs `fault` in a copy of this program inside `unshare -n` (loopback up, nothing
/// else), so its iptables rule touches nothing outside; its rows are printed here.
fn in_private_netns(fault: Fault, policies: &[Policy], matrix: &Matrix) -> anyhow::Result<()> {
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-n", "sh", "-c", "ip link set lo up && exec \"$@\"", "sh"])
        .arg(std::env::current_exe()?)
        .args(["faults", "--fault", fault.name()])
        .args(["--length", &format!("{}ms", matrix.length.as_millis())])
        .args(["--rate", &matrix.rate.to_string()])
        .env(IN_NETNS, "1")
        .stderr(std::process::Stdio::inherit());
    for p in policies {
        cmd.args(["--policy", p.name()]);
    }
    if matrix.tls {
        cmd.arg("--tls");
    }
    let status = cmd.status()?;
    anyhow::ensure!(
        status.success(),
        "{fault} in its network namespace: {status}"
    );
    Ok(())
}

/// Every algorithm at once, each on its own key.
async fn overload_all(store: Option<String>, o: Overload) -> anyhow::Result<()> {
    let own = store.is_none().then(RedisServer::start);
    let url = store.unwrap_or_else(|| own.as_ref().map(RedisServer::url).unwrap_or_default());
    let prefix = unique_prefix("overload");
    let store = RedisStore::builder(&url).prefix(prefix).build().await?;
    eprintln!(
        "{} per {:?}, {}x for {:?}, every algorithm at once on {}",
        o.limit, o.window, o.multiplier, o.length, url
    );
    let reports = overload::run_all(&store, o).await?;
    println!("{OVERLOAD_HEADER}");
    let mut broken = 0;
    for report in reports {
        println!("{report}");
        broken += report.violations();
    }
    anyhow::ensure!(
        broken == 0,
        "{broken} admissions past an algorithm's promise"
    );
    Ok(())
}
