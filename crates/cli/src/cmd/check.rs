//! `spillway check`: one decision from a store (or, in `check/server.rs`, from a running
//! service), for operators and scripts.
//!
//! Exit status 0 allowed, 1 denied, 2 error, so `spillway check … && do_it` works in
//! a shell.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use spillway_core::{
    Algorithm, Calendar, Decision, Key, Limit, Limiter, MemoryStore, Outcome, Period, Request,
    Store,
};
use spillway_policy::duration;
use spillway_redis::{RedisStore, TimeSource};

use crate::args;

pub const EXAMPLES: &str = "\
Exit status: 0 allowed, 1 denied, 2 error (one line on stderr).

Examples:
  # Charge one request for user:42 against 100 per minute (GCRA) in Redis
  spillway check --store redis://127.0.0.1:6379 --algorithm gcra --limit 100 --window 1m user:42

  # Look without charging, as JSON, on a Redis Cluster
  spillway check --store redis+cluster://10.0.0.1:7000,10.0.0.2:7000 --algorithm sliding_log \\
      --limit 1000 --window 1h --peek --json tenant:7

  # Forget a key's state
  spillway check --store redis://127.0.0.1:6379 --algorithm fixed_window --limit 10 --window 1s \\
      --reset ip:203.0.113.9

  # Ask a running service, as Envoy would (gRPC), or over its HTTP API
  spillway check --server grpc://127.0.0.1:8081 --domain api api_key=k1
  spillway check --server grpcs://rls.internal:8081 --ca-file ca.crt --domain api api_key=k1
  spillway check --server http://127.0.0.1:8080 --domain api --peek --json api_key=k1 route=upload
  # At most 3 distinct IPs per API key per hour: exit 1 for a fourth
  spillway check --store redis://127.0.0.1:6379 --algorithm distinct --limit 3 --window 1h \\
      --member 10.0.0.4 api_key=k1";

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// With --store: the key to decide for (a user, an API key, an IP address, ...).
    /// With --server: the descriptor's entries, `key=value` (or `key` for an empty value).
    #[arg(required = true, value_name = "KEY | KEY=VALUE...")]
    pub keys: Vec<String>,

    /// Ask a running Spillway (or any Envoy rate limit service) instead of a store:
    /// http://host:8080 (POST /v1/check) or grpc://host:8081 (ShouldRateLimit); over
    /// TLS, https:// or grpcs:// (see --ca-file, --client-cert, --client-key).
    #[arg(long, conflicts_with_all = ["store", "algorithm", "limit", "window", "precision", "edge",
        "burst", "count_rejected", "reset", "prefix", "local_time"], requires = "domain")]
    pub server: Option<String>,

    /// With --server: the policy domain.
    #[arg(long, requires = "server")]
    pub domain: Option<String>,

    /// Where state lives: `memory` (this process only), or a Redis URL: redis://host:port,
    /// rediss://…, unix:///path, redis+cluster://host:port,…, redis+sentinel://host:port,…/master.
    #[arg(long, env = "SPILLWAY_STORE", default_value = "memory")]
    pub store: String,

    /// The algorithm: fixed_window, sliding_log, sliding_window, token_bucket, gcra,
    /// distinct (counts distinct --member values).
    #[arg(long, required_unless_present = "server")]
    pub algorithm: Option<String>,

    /// Requests (or cost units) allowed per window.
    #[arg(long, allow_negative_numbers = true, value_parser = args::positive, required_unless_present = "server")]
    pub limit: Option<u64>,

    /// Window length (1s, 90s, 1m, 1h, 1d).
    #[arg(long, value_parser = duration::parse, required_unless_present_any = ["server", "period"])]
    pub window: Option<Duration>,

    /// fixed_window: count per calendar period instead of a window (day, week, month,
    /// year), starting at midnight in --time-zone.
    #[arg(long, conflicts_with = "window")]
    pub period: Option<String>,

    /// The IANA time zone of --period (UTC, Europe/Berlin).
    #[arg(long, requires = "period", default_value = "UTC")]
    pub time_zone: String,

    /// sliding_window: sub-buckets per window.
    #[arg(long, allow_negative_numbers = true, value_parser = args::positive_u32)]
    pub precision: Option<u32>,

    /// With --algorithm distinct: the member this request brings (an IP, an account);
    /// with --algorithm concurrency: the id of the hold it takes (taking it again takes one more).
    #[arg(long, conflicts_with = "server")]
    pub member: Option<String>,

    /// sliding_window: how the partly expired sub-bucket counts (interpolate, strict, lenient).
    #[arg(long)]
    pub edge: Option<String>,

    /// token_bucket and gcra: the most admitted at once (default: --limit).
    #[arg(long, allow_negative_numbers = true, value_parser = args::positive)]
    pub burst: Option<u64>,

    /// Charge rejected requests too.
    #[arg(long)]
    pub count_rejected: bool,

    /// Units to charge.
    #[arg(long, default_value = "1", allow_negative_numbers = true, value_parser = args::cost)]
    pub cost: u64,

    /// Report without charging (cost 0).
    #[arg(long, conflicts_with_all = ["cost", "reset"])]
    pub peek: bool,

    /// Charge N units already spent (usage reported after the fact: the tokens a
    /// response used): in full, into debt past the limit. Exit 0 while the limit owes
    /// nothing, 1 while it is in debt. With --server, over HTTP only (`usage: true`);
    /// over gRPC, a `metered` rule takes --cost as usage.
    #[arg(long, value_name = "N", value_parser = args::cost,
          conflicts_with_all = ["cost", "peek", "reset", "member"])]
    pub usage: Option<u64>,

    /// Forget the key's state for this limit instead of deciding.
    #[arg(long)]
    pub reset: bool,

    /// Redis key prefix.
    #[arg(long, default_value = spillway_redis::DEFAULT_PREFIX)]
    pub prefix: String,

    /// Decide with this machine's clock instead of Redis TIME.
    #[arg(long)]
    pub local_time: bool,

    /// Give up on the store (or server) after this long.
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    pub timeout: Duration,

    /// Print JSON instead of a sentence.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub redis: args::RedisAccess,

    #[command(flatten)]
    pub tls: args::ClientTls,
}

mod answer;
mod server;

pub(crate) use answer::{Answer, Verdict};

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
        let settings = args.redis.store()?;
        args::warn_if_insecure(&settings.redis);
        let store = RedisStore::builder(&args.store)
            .access(settings.redis)
            .cluster_shards(settings.cluster_shards)
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
    let calendar = args
        .period
        .as_deref()
        .map(|p| {
            let period = p.parse::<Period>().map_err(anyhow::Error::msg)?;
            Ok::<_, anyhow::Error>(Calendar::new(period, &args.time_zone)?)
        })
        .transpose()?;
    let window = args
        .window
        .or(calendar.as_ref().map(|c| c.period().longest()));
    let (Some(algorithm), Some(n), Some(window)) = (&args.algorithm, args.limit, window) else {
        bail!("--algorithm, --limit and --window (or --period) are required with --store");
    };
    let algorithm: Algorithm = algorithm.parse()?;
    match (algorithm.takes_member(), &args.member) {
        (true, None) if algorithm.holds() => {
            bail!("--algorithm concurrency needs --member: the id of the hold to take")
        }
        (true, None) => bail!("--algorithm distinct needs --member: the value to count"),
        (false, Some(_)) => bail!("--member applies to --algorithm distinct and concurrency only"),
        _ => {}
    }
    let shape = crate::limit::Shape {
        precision: args.precision,
        edge: args.edge.as_deref(),
        burst: args.burst,
        count_rejected: args.count_rejected,
        calendar,
        max_wait: None,
    };
    crate::limit::build(algorithm, n, window, shape)
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
    let (cost, usage) = args.charge();
    let mut request = Request {
        usage,
        ..Request::new(key, limit, cost)
    };
    if let Some(member) = &args.member {
        request = request.with_member(member.as_bytes());
    }
    let d = limiter.check_all(&[request]).await?.decisions[0];
    if args.json {
        let mut answer = to_json(&d, key, limit, cost);
        if usage {
            answer["usage"] = json!(true);
        }
        println!("{answer}");
    } else {
        println!("{}", describe(&d, key, cost, usage));
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

fn describe(d: &Decision, key: &Key, cost: u64, usage: bool) -> String {
    Answer {
        usage,
        subject: key.as_str(),
        verdict: match d.outcome {
            Outcome::Allowed => Verdict::Allowed,
            Outcome::Denied { retry_after } => Verdict::Denied {
                retry_after_ms: Some(ms(retry_after)),
            },
            Outcome::CostExceedsCapacity => Verdict::CostExceedsCapacity,
        },
        peek: cost == 0,
        cost,
        rule: None,
        remaining: d.remaining,
        capacity: Some(d.limit),
        rate: None,
        reset_after_ms: Some(ms(d.reset_after)),
    }
    .sentence()
}

impl CheckArgs {
    /// The cost to charge and whether it is usage: `--usage N`, `--peek` (0), or
    /// `--cost`.
    pub(crate) fn charge(&self) -> (u64, bool) {
        match self.usage {
            Some(n) => (n, true),
            None if self.peek => (0, false),
            None => (self.cost, false),
        }
    }
}
