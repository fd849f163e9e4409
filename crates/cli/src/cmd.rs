//! One module per subcommand; each `run` returns the process exit status.

mod bench;
mod check;
mod serve;
mod simulate;
mod validate;

use std::process::ExitCode;

use crate::cli::Command;

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Bench(args) => bench::run(args),
        Command::Check(args) => check::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Validate(args) => validate::run(args),
    }
}
