//! `spillway bench`: a load generator for Spillway itself — a store, policies on a store,
//! or a running service — reporting throughput, latency percentiles, decisions and CPU
//! per decision (this process, the service, Redis), and with `--check`, verifying on
//! one hot key that no more were admitted than the limit allows for the time the run
//! took.

mod cpu;
mod load;
mod report;
mod rlqs;
mod setup;
mod target;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use spillway_core::{Algorithm, Limit};
use spillway_policy::RuleLimit;
use spillway_policy::duration;

use crate::args;
use load::{Keys, Loop};
use report::report;
use setup::{flag_limit, keys, stats_store, target};

pub const EXAMPLES: &str = "\
Exit status: 0 done, 1 --check found more admitted than the limit allows, 2 error.

Examples:
  # The in-process memory store, GCRA, 10,000 keys, 32 callers for 10 s
  spillway bench --store memory --algorithm gcra --limit 100 --window 1s

  # Redis, a Zipf-distributed key population, an open loop at 20,000 requests/s
  spillway bench --store redis://127.0.0.1:6379 --algorithm sliding_log --limit 100 --window 1m \\
      --zipf 1.1 --rate 20000 --duration 30s

  # A running service over gRPC, with its CPU and its Redis's per decision
  spillway bench --server grpc://127.0.0.1:8081 --domain api --server-pid \"$(pidof spillway)\" \
      --redis-stats redis://127.0.0.1:6379

  # A running service over gRPC, with its policy file; verify exactness on one hot key
  spillway bench --server grpc://127.0.0.1:8081 --config policies/ --domain api --key-name user \\
      --hot --check --json";

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// A store to load directly: `memory` (in this process) or a Redis URL.
    #[arg(long, conflicts_with = "server", required_unless_present = "server")]
    pub store: Option<String>,

    /// A running service: http://host:8080 (POST /v1/check) or grpc://host:8081
    /// (ShouldRateLimit); over TLS, https:// or grpcs:// (see --ca-file).
    #[arg(long)]
    pub server: Option<String>,

    /// The algorithm (with --limit and --window), instead of --config.
    #[arg(long, conflicts_with = "config", requires_all = ["limit", "window"])]
    pub algorithm: Option<String>,

    /// Requests allowed per window.
    #[arg(long, allow_negative_numbers = true, value_parser = args::positive)]
    pub limit: Option<u64>,

    /// The window (1s, 1m, 1h).
    #[arg(long, value_parser = duration::parse)]
    pub window: Option<Duration>,

    /// token_bucket and gcra: the most admitted at once.
    #[arg(long, allow_negative_numbers = true, value_parser = args::positive)]
    pub burst: Option<u64>,

    /// token_bucket and gcra: admit a request whose turn comes within this wait after
    /// it (the report shows the waits; the load does not sleep them).
    #[arg(long, value_parser = duration::parse)]
    pub max_wait: Option<Duration>,

    /// sliding_window and distinct: sub-buckets per window.
    #[arg(long, allow_negative_numbers = true, value_parser = args::positive_u32)]
    pub precision: Option<u32>,

    /// distinct: how many different members the requests bring, each coming back at
    /// the same rate (default: twice the limit).
    #[arg(long, allow_negative_numbers = true, value_parser = args::positive)]
    pub members: Option<u64>,

    /// With --store and --algorithm: each of this process's callers shares the limit
    /// through the store by a lease of this many units (`lease:` in a policy).
    #[arg(long, requires_all = ["store", "algorithm"], conflicts_with = "sync", allow_negative_numbers = true, value_parser = args::positive)]
    pub lease: Option<u64>,

    /// With --store and --algorithm: count locally and add to the store every this
    /// long (`sync:` in a policy).
    #[arg(long, requires_all = ["store", "algorithm"], value_parser = duration::parse)]
    pub sync: Option<Duration>,

    /// A policy file or directory (with --domain): its rules decide, as `serve` would.
    #[arg(long, requires = "domain")]
    pub config: Option<PathBuf>,

    /// The policy domain (with --config, or --server).
    #[arg(long)]
    pub domain: Option<String>,

    /// The descriptor key each request carries (its value is the generated key).
    #[arg(long, default_value = "key")]
    pub key_name: String,

    /// Distinct keys, chosen uniformly.
    #[arg(long, default_value = "10000", value_parser = args::positive, conflicts_with_all = ["hot"])]
    pub keys: u64,

    /// Every request on one key (a new one each run, unless --hot-key names it).
    #[arg(long)]
    pub hot: bool,

    /// With --hot: the key's value, to load one key from several processes at once.
    #[arg(long, requires = "hot")]
    pub hot_key: Option<String>,

    /// Keys chosen by a Zipf law with this exponent over --keys keys.
    #[arg(long, conflicts_with = "hot")]
    pub zipf: Option<f64>,

    /// Closed loop: callers, each waiting for its answer before the next request.
    #[arg(long, default_value = "32", value_parser = args::positive)]
    pub concurrency: u64,

    /// Open loop: requests per second, sent on schedule whatever the answers' latency
    /// (latency counts from when a request should have been sent).
    #[arg(long, conflicts_with = "concurrency", allow_negative_numbers = true)]
    pub rate: Option<f64>,

    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    pub duration: Duration,

    /// Verify exactness: with --hot and an exact algorithm, fail if more were admitted
    /// than the limit allows for the elapsed time.
    #[arg(long, requires = "hot")]
    pub check: bool,

    /// A `concurrency` limit: each admitted request holds its slot this long, then gives
    /// it back (each request's hold is named by a new id; a service's policy has the
    /// concurrency rule at the node of --hold-key under --key-name). The report says the
    /// most holds of one key live at once.
    #[arg(long, value_parser = duration::parse)]
    pub hold: Option<Duration>,

    /// With --hold and --server: the descriptor key that carries each hold's id.
    #[arg(long, default_value = "request_id", requires = "hold")]
    pub hold_key: String,

    /// Envoy-like Rate Limit Quota Service load instead of decisions: this many streams
    /// on --server (grpc://), each reporting --keys buckets every --report-every; says
    /// reports and assignments a second, and with --server-pid the service's CPU per
    /// report and per assignment.
    #[arg(long, requires_all = ["server", "domain"], value_parser = args::positive)]
    pub rlqs: Option<u64>,

    /// With --rlqs: how often each stream reports (Envoy 1.40: every 5 s).
    #[arg(long, default_value = "5s", value_parser = duration::parse, requires = "rlqs")]
    pub report_every: Duration,

    /// Give up on one call after this long (counted as a timeout error).
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    pub timeout: Duration,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// With --server: the service's process ID, to report its CPU per decision (read
    /// from /proc, so on the same host).
    #[arg(long, requires = "server")]
    pub server_pid: Option<u32>,

    /// With --server: the Redis the service uses, to report Redis CPU per decision and
    /// decisions per call (from its INFO; with --store redis://… this is automatic).
    #[arg(long, requires = "server")]
    pub redis_stats: Option<String>,

    #[command(flatten)]
    pub redis: args::RedisAccess,

    #[command(flatten)]
    pub tls: args::ClientTls,
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench(args))
}

async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(streams) = args.rlqs {
        rlqs::bench(&args, streams as usize).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let flag_limit = flag_limit(&args)?;
    let policies = match &args.config {
        Some(path) => Some(spillway_policy::load(path)?),
        None => None,
    };
    let keys = keys(&args)?;
    let hot_key = match &keys {
        Keys::Hot(k) => Some(k.clone()),
        _ => None,
    };
    // The limit `--check` holds the run to: the flags', or the policy rule the hot key matches.
    let checked_limit = match (&flag_limit, &policies, &hot_key) {
        (Some(l), _, _) => Some(l.clone()),
        (None, Some(set), Some(key)) => {
            let domain = args.domain.as_deref().context("--config needs --domain")?;
            let d = set
                .domain(domain)
                .with_context(|| format!("no domain `{domain}` in the policy files"))?;
            d.resolve(&[(args.key_name.as_str(), key.as_str())])
                .and_then(|m| {
                    m.rules.iter().find_map(|r| match &r.limit {
                        RuleLimit::Limited(l) => Some(l.clone()),
                        _ => None,
                    })
                })
        }
        _ => None,
    };
    if args.check {
        match &checked_limit {
            None => bail!(
                "--check needs a limit: --algorithm/--limit/--window, or --config with a rule for --key-name"
            ),
            Some(l) if !l.algorithm().is_exact() => {
                bail!(
                    "--check verifies exact algorithms; {} is approximate",
                    l.algorithm().name()
                )
            }
            Some(l) if l.algorithm().holds() => {
                bail!("--check verifies requests per window; concurrency counts holds at once")
            }
            Some(_) => {}
        }
    }

    match (&flag_limit, args.hold) {
        (Some(l), None) if l.algorithm().holds() => bail!(
            "a concurrency limit takes holds and gives them back: say how long each is held with --hold"
        ),
        (Some(l), Some(_)) if !l.algorithm().holds() => bail!(
            "--hold applies to a concurrency limit, not {}",
            l.algorithm().name()
        ),
        _ => {}
    }
    let (target, described, redis) = target(&args, flag_limit, policies).await?;
    let mode = match args.rate {
        Some(r) if r > 0.0 && r.is_finite() => Loop::Open { per_sec: r },
        Some(r) => bail!("--rate must be a positive number of requests per second, got {r}"),
        None => Loop::Closed {
            callers: args.concurrency as usize,
        },
    };
    let stats = match &args.redis_stats {
        Some(url) => Some(stats_store(&args, url).await?),
        None => redis,
    };
    let holds = args
        .hold
        .map(|hold| Arc::new(load::Holds::new(hold, args.hold_key.clone())));
    let meter = cpu::Meter::start(args.server_pid, stats).await?;
    let tally = load::run(
        Arc::new(target),
        keys,
        mode,
        (args.duration, args.timeout),
        holds.clone(),
        args.json,
    )
    .await;

    let check = checked_limit
        .filter(|_| args.check)
        .map(|limit| (tally.admitted, allowed_in(&limit, tally.elapsed)));
    let cost = meter.finish(tally.decisions()).await?;
    let holds = holds.map(|h| (h.hold, h.most()));
    report(&args, &described, mode, &tally, &cost, check, holds);
    Ok(match check {
        Some((admitted, allowed)) if admitted > allowed => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

/// The most an exact algorithm may admit over `elapsed`, with a little slack for the
/// gap between this machine's clock and the store's, and for requests in flight at the
/// edges of the run.
fn allowed_in(limit: &Limit, elapsed: Duration) -> u64 {
    let slack = Duration::from_millis(50);
    let t = (elapsed + slack).as_micros() as u64;
    let w = limit.window_micros();
    let windows = t.div_ceil(w);
    match limit.algorithm() {
        // Every aligned window the run touched: at most one more than its length covers.
        Algorithm::FixedWindow => limit.limit() * (windows + 1),
        // Any W-long span holds at most `limit`; the run is covered by ceil(T/W) of them.
        Algorithm::SlidingLog | Algorithm::SlidingWindow { .. } => limit.limit() * windows,
        // A full bucket, then the refill over T (a shares tree: its parent's).
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::Shares => {
            limit.burst()
                + (u128::from(limit.limit()) * u128::from(t)).div_ceil(u128::from(w)) as u64
        }
        // Counts members or holds, not requests: `--check` refuses them.
        Algorithm::Distinct { .. } | Algorithm::Concurrency => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exactness_bound_per_algorithm() {
        let secs = |s| Duration::from_secs(s);
        let l = |a| Limit::new(a, 10, secs(1)).unwrap();
        // 2 s (+ 50 ms slack) is covered by 3 one-second spans.
        assert_eq!(allowed_in(&l(Algorithm::SlidingLog), secs(2)), 30);
        assert_eq!(allowed_in(&l(Algorithm::FixedWindow), secs(2)), 40);
        // burst 10 + 10/s × 2.05 s, rounded up.
        assert_eq!(allowed_in(&l(Algorithm::Gcra), secs(2)), 31);
    }
}
