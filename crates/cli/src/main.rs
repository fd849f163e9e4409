//! `spillway`: the one binary operators use. `main` only parses, runs the command,
//! and turns an error into one line on stderr and exit status 2.

#![forbid(unsafe_code)]
// `bench` spawns the service's decision future, which nests the Redis client's futures
// (see spillway-server); proving it `Send` needs more than the default depth.
#![recursion_limit = "256"]

mod args;
mod client;
mod cmd;
mod limit;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cmd::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's first paragraph says what is wrong (and what would be valid); the
            // rest is a usage reminder. One line is easier to read in scripts and logs.
            let rendered = e.render().to_string();
            let what: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!("{}", what.join(" "));
            return ExitCode::from(2);
        }
    };
    match cmd::run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
