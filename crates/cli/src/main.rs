//! `spillway`: the one binary operators use. `main` only parses, runs the command,
//! and turns an error into one line on stderr and exit status 2.

#![forbid(unsafe_code)]
// `bench` spawns the service's decision future, which nests the Redis client's futures
// (see spillway-server); proving it `Send` needs more than the default depth.
#![recursion_limit = "256"]

/// mimalloc, not the system's malloc: glibc's, after a million overrides were imported
/// in parts, made every request's allocations slower (a decision's CPU 1.25× a
/// service's without overrides, against 1.03× with mimalloc; docs/performance.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod args;
mod client;
mod cmd;
mod limit;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cmd::Cli::try_parse_from(arguments(std::env::args_os())) {
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
            eprintln!("error: {}", one_line(e.as_ref()));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes on one line, each cause said once: an error that already
/// names its cause in its own message (`cannot listen on …: Address already in use`) is
/// not followed by that cause again, and one whose message leaves its cause out
/// (tonic's "transport error", whose source says "Connection refused") is.
pub(crate) fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// The command line, with `serve` put first when the binary is called `ratelimit`: an
/// image that installs Spillway as `/bin/ratelimit` runs where the reference's image
/// runs, started as Envoy Gateway starts it (the command alone, settings in the
/// environment).
fn arguments(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.into_iter().collect();
    if args.first().is_some_and(|a| is_ratelimit(a)) {
        args.insert(1, "serve".into());
    }
    args
}

fn is_ratelimit(arg0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(arg0)
        .file_name()
        .is_some_and(|name| name == "ratelimit")
}

/// Whether this process was started as `ratelimit` (as the image starts it): then the
/// reference's defaults apply.
pub(crate) fn called_ratelimit() -> bool {
    std::env::args_os().next().is_some_and(|a| is_ratelimit(&a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_says_each_cause_once() {
        let os = || std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let named = anyhow::Error::new(os()).context(format!("cannot listen on :80: {}", os()));
        assert_eq!(
            one_line(named.as_ref()),
            format!("cannot listen on :80: {}", os())
        );
        let unnamed = anyhow::Error::new(os()).context("cannot listen on :80");
        assert_eq!(
            one_line(unnamed.as_ref()),
            format!("cannot listen on :80: {}", os())
        );
    }

    #[test]
    fn called_ratelimit_it_serves() {
        let args = |v: &[&str]| arguments(v.iter().map(std::ffi::OsString::from));
        assert_eq!(args(&["/bin/ratelimit"]), ["/bin/ratelimit", "serve"]);
        assert_eq!(
            args(&["/usr/bin/spillway", "check"]),
            ["/usr/bin/spillway", "check"]
        );
    }
}
