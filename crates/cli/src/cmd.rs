//! The command line: one module per subcommand, holding its arguments, examples and
//! `run` (which returns the process exit status).

mod bench;
mod check;
mod config;
mod explain;
mod limits;
mod serve;
mod simulate;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Spillway: rate limiting that is exact where others approximate.
#[derive(Debug, Parser)]
#[command(name = "spillway", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the rate limit service: Envoy's gRPC protocol and an HTTP/JSON API.
    #[command(after_help = serve::EXAMPLES)]
    Serve(serve::ServeArgs),
    /// Print the configuration serve would run with and where each value comes from.
    #[command(after_help = config::EXAMPLES)]
    Config(config::ConfigArgs),
    /// Load-test a store or a running service: throughput, latency percentiles, decisions.
    #[command(after_help = bench::EXAMPLES)]
    Bench(bench::BenchArgs),
    /// Ask a store or a running service for one decision: would KEY be admitted?
    #[command(after_help = check::EXAMPLES)]
    Check(check::CheckArgs),
    /// Ask a running service why a request would be admitted or limited, consuming nothing.
    #[command(after_help = explain::EXAMPLES)]
    Explain(explain::ExplainArgs),
    /// Set, read, list and remove overrides: a path's own limits, on a running service.
    #[command(after_help = limits::EXAMPLES)]
    Limits(limits::LimitsArgs),
    /// Load policy files exactly as `serve` would: every error, or a summary of the rules.
    #[command(after_help = validate::EXAMPLES)]
    Validate(validate::ValidateArgs),
    /// Replay a traffic pattern through the algorithms on a manual clock and compare them.
    #[command(after_help = simulate::EXAMPLES)]
    Simulate(simulate::SimulateArgs),
}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Bench(args) => bench::run(args),
        Command::Check(args) => check::run(args),
        Command::Config(args) => config::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Limits(args) => limits::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Validate(args) => validate::run(args),
    }
}

/// A descriptor's entries from `key=value` arguments (`key` alone: an empty value).
fn entries(args: &[String]) -> Vec<(String, String)> {
    args.iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (kv.clone(), String::new()),
        })
        .collect()
}

/// One descriptor of `entries` with `cost`, as `/v1/check` and `/v1/explain` take it.
fn descriptor_body(domain: &str, entries: &[(String, String)], cost: u64) -> serde_json::Value {
    let entries: Vec<_> = entries
        .iter()
        .map(|(k, v)| serde_json::json!({ "key": k, "value": v }))
        .collect();
    serde_json::json!({
        "domain": domain,
        "descriptors": [{ "entries": entries }],
        "cost": cost,
    })
}

/// `POST {server}{path}` of `body` ([`descriptor_body`]), with the admin `token` if
/// given: the JSON answer. A status other than 2xx or 429 is an error naming the
/// service's message (and, for a 401, how to give the token).
async fn post_descriptor(
    server: &str,
    tls: &crate::args::ClientTls,
    token: Option<&spillway_redis::Password>,
    path: &str,
    body: &serde_json::Value,
    timeout: std::time::Duration,
) -> anyhow::Result<serde_json::Value> {
    let crate::client::Server::Http {
        base,
        tls: over_tls,
    } = crate::client::Server::parse(server)?
    else {
        anyhow::bail!("--server `{server}` is not http://host:port or https://host:port");
    };
    let client = tls.http_client(&base, over_tls)?;
    let endpoint = format!("{base}{path}");
    let (status, v) = crate::client::post_json(&client, &endpoint, body, token, timeout).await?;
    if !(status.is_success() || status == hyper::StatusCode::TOO_MANY_REQUESTS) {
        let message = v["error"]["message"].as_str().unwrap_or("no message");
        let hint = match (status, token) {
            (hyper::StatusCode::UNAUTHORIZED, None) => {
                " (give the token with --token-file FILE or SPILLWAY_ADMIN_TOKEN)"
            }
            (hyper::StatusCode::UNAUTHORIZED, Some(_)) => " (the token given was refused)",
            (hyper::StatusCode::NOT_FOUND, _) if path == "/v1/explain" => {
                " (explain asks the admin listener, admin_addr: 127.0.0.1:6070 by default)"
            }
            _ => "",
        };
        anyhow::bail!("{endpoint} answered {status}: {message}{hint}");
    }
    Ok(v)
}
