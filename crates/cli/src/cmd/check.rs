//! `spillway check`: one decision from a store (or, in `check/server.rs`, from a running
//! service), for operators and scripts.
//!
//! Exit status 0 allowed, 1 denied, 2 error, so `spillway check … && do_it` works in
//! a shell.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use spillway_core::{Algorithm, Decision, Edge, Key, Limit, Limiter, MemoryStore, Outcome, Store};
use spillway_redis::{RedisStore, TimeSource};

use crate::cli::CheckArgs;
use crate::duration;

mod server;

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Some(url) = &args.server {
        return runtime.block_on(server::run(&args, url));
    }
    let [key] = args.keys.as_slice() else {
        bail!("give one KEY with --store (key=value entries are for --server)");
    };
    let limit = limit(&args)?;
    let key = Key::new(key).context("invalid key")?;
    runtime.block_on(async {
        if args.store == "memory" {
            return decide(&args, Limiter::new(MemoryStore::new()), &key, &limit).await;
        }
        let time = if args.local_time {
            TimeSource::Caller
        } else {
            TimeSource::Server
        };
        let store = RedisStore::builder(&args.store)
            .prefix(&args.prefix)
            .time_source(time)
            .timeout(args.timeout)
            .connect_timeout(args.timeout)
            .build()
            .await?;
        decide(&args, Limiter::new(store), &key, &limit).await
    })
}

fn limit(args: &CheckArgs) -> anyhow::Result<Limit> {
    // clap requires these unless --server is given, and --server returned earlier.
    let (Some(algorithm), Some(n), Some(window)) = (&args.algorithm, args.limit, args.window)
    else {
        bail!("--algorithm, --limit and --window are required with --store");
    };
    let mut algorithm: Algorithm = algorithm.parse()?;
    match &mut algorithm {
        Algorithm::SlidingWindow { precision, edge } => {
            *precision = args.precision.unwrap_or(1);
            if let Some(e) = &args.edge {
                *edge = e.parse::<Edge>()?;
            }
        }
        _ if args.precision.is_some() || args.edge.is_some() => {
            bail!("--precision and --edge apply to sliding_window only")
        }
        _ => {}
    }
    if args.burst.is_some() && !matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra) {
        bail!("--burst applies to token_bucket and gcra only");
    }
    crate::limit::build(algorithm, n, window, args.burst, args.count_rejected)
}

async fn decide<S: Store>(
    args: &CheckArgs,
    limiter: Limiter<S>,
    key: &Key,
    limit: &Limit,
) -> anyhow::Result<ExitCode> {
    if args.reset {
        limiter.reset(key, limit).await?;
        if args.json {
            println!(
                "{}",
                json!({ "reset": true, "key": key.as_str(), "limit": limit.to_string() })
            );
        } else {
            println!("reset {} for {limit}", key.as_str());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let cost = if args.peek { 0 } else { args.cost };
    let d = limiter.check_n(key, limit, cost).await?;
    if args.json {
        println!("{}", to_json(&d, key, limit, cost));
    } else {
        println!("{}", describe(&d, key, cost));
    }
    Ok(if d.allowed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Whole milliseconds, rounded up: retrying after `retry_after_ms` never comes early.
fn ms(d: Duration) -> u64 {
    d.as_micros().div_ceil(1000) as u64
}

fn to_json(d: &Decision, key: &Key, limit: &Limit, cost: u64) -> serde_json::Value {
    let outcome = match d.outcome {
        Outcome::Allowed => "allowed",
        Outcome::Denied { .. } => "denied",
        Outcome::CostExceedsCapacity => "cost_exceeds_capacity",
    };
    json!({
        "allowed": d.allowed(),
        "outcome": outcome,
        "key": key.as_str(),
        "rule": limit.to_string(),
        "cost": cost,
        "limit": d.limit,
        "remaining": d.remaining,
        "reset_after_ms": ms(d.reset_after),
        "retry_after_ms": d.retry_after().map(ms),
    })
}

fn describe(d: &Decision, key: &Key, cost: u64) -> String {
    let state = format!(
        "{} of {} remaining, full again in {}",
        d.remaining,
        d.limit,
        duration::format(Duration::from_millis(ms(d.reset_after)))
    );
    match d.outcome {
        Outcome::Allowed if cost == 0 => format!("{}: would be allowed; {state}", key.as_str()),
        Outcome::Allowed => format!("{}: allowed; {state}", key.as_str()),
        Outcome::Denied { retry_after } => format!(
            "{}: denied, retry in {}; {state}",
            key.as_str(),
            duration::format(Duration::from_millis(ms(retry_after)))
        ),
        Outcome::CostExceedsCapacity => format!(
            "{}: denied for good: cost {cost} is more than the capacity {}",
            key.as_str(),
            d.limit
        ),
    }
}
