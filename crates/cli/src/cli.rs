//! The command line: every subcommand and its flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::duration;

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
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Load-test a store or a running service: throughput, latency percentiles, decisions.
    #[command(after_help = BENCH_EXAMPLES)]
    Bench(BenchArgs),
    /// Ask a store for one decision: would KEY be admitted under this limit?
    #[command(after_help = CHECK_EXAMPLES)]
    Check(CheckArgs),
    /// Load policy files exactly as `serve` would: every error, or a summary of the rules.
    #[command(after_help = VALIDATE_EXAMPLES)]
    Validate(ValidateArgs),
    /// Replay a traffic pattern through the algorithms on a manual clock and compare them.
    #[command(after_help = SIMULATE_EXAMPLES)]
    Simulate(SimulateArgs),
}

const SIMULATE_EXAMPLES: &str = "\
Examples:
  # The boundary attack on every algorithm, 100 per minute: fixed windows let 2× through
  spillway simulate --pattern boundary --limit 100 --window 1m

  # Poisson traffic at twice the limit, as JSON, with a chart
  spillway simulate --pattern poisson --rate 3.33 --json --svg poisson.svg

  # Figma's limiter (60 sub-buckets, strict) against the exact log
  spillway simulate --algorithms sliding_log,sliding_window --precision 60 --edge strict";

const BENCH_EXAMPLES: &str = "\
Exit status: 0 done, 1 --check found more admitted than the limit allows, 2 error.

Examples:
  # The in-process memory store, GCRA, 10,000 keys, 32 callers for 10 s
  spillway bench --store memory --algorithm gcra --limit 100 --window 1s

  # Redis, a Zipf-distributed key population, an open loop at 20,000 requests/s
  spillway bench --store redis://127.0.0.1:6379 --algorithm sliding_log --limit 100 --window 1m \\
      --zipf 1.1 --rate 20000 --duration 30s

  # A running service over gRPC, with its policy file; verify exactness on one hot key
  spillway bench --server grpc://127.0.0.1:8081 --config policies/ --domain api --key-name user \\
      --hot --check --json";

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// A store to load directly: `memory` (in this process) or a Redis URL.
    #[arg(long, conflicts_with = "server", required_unless_present = "server")]
    pub store: Option<String>,

    /// A running service: http://host:8080 (POST /v1/check) or grpc://host:8081 (ShouldRateLimit).
    #[arg(long)]
    pub server: Option<String>,

    /// The algorithm (with --limit and --window), instead of --config.
    #[arg(long, conflicts_with = "config", requires_all = ["limit", "window"])]
    pub algorithm: Option<String>,

    /// Requests allowed per window.
    #[arg(long, allow_negative_numbers = true, value_parser = positive)]
    pub limit: Option<u64>,

    /// The window (1s, 1m, 1h).
    #[arg(long, value_parser = duration::parse)]
    pub window: Option<Duration>,

    /// token_bucket and gcra: the most admitted at once.
    #[arg(long, allow_negative_numbers = true, value_parser = positive)]
    pub burst: Option<u64>,

    /// sliding_window: sub-buckets per window.
    #[arg(long, allow_negative_numbers = true, value_parser = positive_u32)]
    pub precision: Option<u32>,

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
    #[arg(long, default_value = "10000", value_parser = positive, conflicts_with_all = ["hot"])]
    pub keys: u64,

    /// Every request on one key.
    #[arg(long)]
    pub hot: bool,

    /// Keys chosen by a Zipf law with this exponent over --keys keys.
    #[arg(long, conflicts_with = "hot")]
    pub zipf: Option<f64>,

    /// Closed loop: callers, each waiting for its answer before the next request.
    #[arg(long, default_value = "32", value_parser = positive)]
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

    /// Give up on one call after this long (counted as a timeout error).
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    pub timeout: Duration,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

const VALIDATE_EXAMPLES: &str = "\
Exit status: 0 every file is valid, 1 a file has errors (each printed as
FILE:LINE: FIELD: MESSAGE on stderr), 2 the command itself could not run.

Examples:
  # Check a policy directory before deploying it
  spillway validate /etc/spillway/policies

  # In CI, as JSON
  spillway validate --json policies/ > validation.json";

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// A policy file, or a directory of them (one domain per file).
    pub path: PathBuf,

    /// Print JSON: {"valid": true, "domains": [...]} or {"valid": false, "errors": [...]}.
    #[arg(long)]
    pub json: bool,
}

const SERVE_EXAMPLES: &str = "\
Settings come from, later winning: defaults, --settings FILE, the Envoy reference
service's variables (REDIS_URL, REDIS_TYPE, RUNTIME_ROOT, PORT, GRPC_PORT, LOG_LEVEL,
SHADOW_MODE, LIMIT_RESPONSE_HEADERS_ENABLED, ...), then flags and SPILLWAY_* variables.

Examples:
  # The example policies on the in-memory store (HTTP :8080, gRPC :8081)
  spillway serve --config examples/policies

  # Shared limits in Redis; fall back to a local limiter when Redis fails
  spillway serve --config /etc/spillway --store redis://10.0.0.5:6379 --on-store-error local

  # A drop-in for envoyproxy/ratelimit: its variables and files work unchanged
  REDIS_SOCKET_TYPE=tcp REDIS_URL=redis:6379 RUNTIME_ROOT=/data RUNTIME_SUBDIRECTORY=ratelimit \\
      spillway serve";

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A policy file, or a directory of them (one domain per file).
    #[arg(long, env = "SPILLWAY_CONFIG")]
    pub config: Option<PathBuf>,

    /// Where counters live: `memory`, or a Redis URL (redis://, rediss://, unix://,
    /// redis+cluster://host:port,..., redis+sentinel://host:port,.../master).
    #[arg(long, env = "SPILLWAY_STORE")]
    pub store: Option<String>,

    /// HTTP listen address (/v1/check, /json, /metrics, /healthz, /readyz).
    #[arg(long, env = "SPILLWAY_HTTP_ADDR")]
    pub http_addr: Option<String>,

    /// gRPC listen address (ShouldRateLimit, health).
    #[arg(long, env = "SPILLWAY_GRPC_ADDR")]
    pub grpc_addr: Option<String>,

    /// A settings file (YAML; the keys are these flags' names with underscores).
    #[arg(long, env = "SPILLWAY_SETTINGS")]
    pub settings: Option<PathBuf>,

    /// Give up on a store call after this long (default 10ms).
    #[arg(long, env = "SPILLWAY_STORE_TIMEOUT", value_parser = duration::parse)]
    pub store_timeout: Option<Duration>,

    /// For rules without their own: open (admit), closed (503 / UNAVAILABLE), local
    /// (an in-process limiter). Default closed, as the reference answers an error.
    #[arg(long, env = "SPILLWAY_ON_STORE_ERROR")]
    pub on_store_error: Option<String>,

    /// /v1/check's rate limit headers: ietf, legacy, x-ratelimit, none.
    #[arg(long, env = "SPILLWAY_HEADERS")]
    pub headers: Option<String>,

    /// Never answer over-limit overall (statuses still say who is over).
    #[arg(long, env = "SPILLWAY_SHADOW_MODE")]
    pub shadow_mode: bool,

    /// error, warn, info, debug, trace, or a tracing filter.
    #[arg(long, env = "SPILLWAY_LOG_LEVEL")]
    pub log_level: Option<String>,

    /// text or json.
    #[arg(long, env = "SPILLWAY_LOG_FORMAT")]
    pub log_format: Option<String>,

    /// Do not reload the policies when their files change.
    #[arg(long)]
    pub no_watch: bool,
}

const CHECK_EXAMPLES: &str = "\
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
  spillway check --server http://127.0.0.1:8080 --domain api --peek --json api_key=k1 route=upload";

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// With --store: the key to decide for (a user, an API key, an IP address, ...).
    /// With --server: the descriptor's entries, `key=value` (or `key` for an empty value).
    #[arg(required = true, value_name = "KEY | KEY=VALUE...")]
    pub keys: Vec<String>,

    /// Ask a running Spillway (or any Envoy rate limit service) instead of a store:
    /// http://host:8080 (POST /v1/check) or grpc://host:8081 (ShouldRateLimit).
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

    /// The algorithm: fixed_window, sliding_log, sliding_window, token_bucket, gcra.
    #[arg(long, required_unless_present = "server")]
    pub algorithm: Option<String>,

    /// Requests (or cost units) allowed per window.
    #[arg(long, allow_negative_numbers = true, value_parser = positive, required_unless_present = "server")]
    pub limit: Option<u64>,

    /// Window length (1s, 90s, 1m, 1h, 1d).
    #[arg(long, value_parser = duration::parse, required_unless_present = "server")]
    pub window: Option<Duration>,

    /// sliding_window: sub-buckets per window.
    #[arg(long, allow_negative_numbers = true, value_parser = positive_u32)]
    pub precision: Option<u32>,

    /// sliding_window: how the partly expired sub-bucket counts (interpolate, strict, lenient).
    #[arg(long)]
    pub edge: Option<String>,

    /// token_bucket and gcra: the most admitted at once (default: --limit).
    #[arg(long, allow_negative_numbers = true, value_parser = positive)]
    pub burst: Option<u64>,

    /// Charge rejected requests too.
    #[arg(long)]
    pub count_rejected: bool,

    /// Units to charge.
    #[arg(long, default_value = "1", allow_negative_numbers = true, value_parser = cost)]
    pub cost: u64,

    /// Report without charging (cost 0).
    #[arg(long, conflicts_with_all = ["cost", "reset"])]
    pub peek: bool,

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// Evenly spaced requests at --rate.
    Uniform,
    /// Random (exponential) gaps averaging --rate.
    Poisson,
    /// Bursts of --limit requests, each within 1% of the window, averaging --rate.
    Bursts,
    /// --limit requests just before a window edge and --limit just after, every other window.
    Boundary,
    /// A seeded adversary: random bursts aimed at window and sub-bucket edges, trickles and pauses.
    Adversarial,
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Traffic pattern.
    #[arg(long, value_enum, default_value = "boundary")]
    pub pattern: Pattern,

    /// Algorithms to compare: comma-separated names (fixed_window, sliding_log,
    /// sliding_window, token_bucket, gcra) or `all`. Without --edge, `all` runs
    /// sliding_window in each edge mode.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub algorithms: Vec<String>,

    /// Requests allowed per window.
    #[arg(long, default_value = "100", allow_negative_numbers = true, value_parser = positive)]
    pub limit: u64,

    /// Window length (90s, 1m, 1h, ...).
    #[arg(long, default_value = "1m", value_parser = duration::parse)]
    pub window: Duration,

    /// sliding_window: sub-buckets per window.
    #[arg(long, default_value = "1", allow_negative_numbers = true, value_parser = positive_u32)]
    pub precision: u32,

    /// sliding_window: how the partly expired sub-bucket counts (interpolate, strict, lenient).
    #[arg(long)]
    pub edge: Option<String>,

    /// token_bucket and gcra: the most admitted at once (default: --limit).
    #[arg(long, allow_negative_numbers = true, value_parser = positive)]
    pub burst: Option<u64>,

    /// Mean requests per second for uniform, poisson, bursts and adversarial
    /// (default: twice the limit).
    #[arg(long, allow_negative_numbers = true)]
    pub rate: Option<f64>,

    /// Simulated time (default: 10 windows).
    #[arg(long, value_parser = duration::parse)]
    pub duration: Option<Duration>,

    /// Seed for the random patterns; the same seed gives the same run.
    #[arg(long, default_value = "1")]
    pub seed: u64,

    /// Print JSON (an array, one object per algorithm) instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Draw admitted requests in the trailing window over time as SVG.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// The same chart as PNG.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
}

fn positive(s: &str) -> Result<u64, String> {
    match s.parse::<i128>() {
        Ok(n) if n >= 1 && n <= i128::from(u64::MAX) => Ok(n as u64),
        Ok(n) => Err(format!("must be a positive whole number, got {n}")),
        Err(_) => Err(format!("must be a positive whole number, got `{s}`")),
    }
}

fn cost(s: &str) -> Result<u64, String> {
    match s.parse::<i128>() {
        Ok(n) if n >= 0 && n <= i128::from(spillway_core::MAX_EXACT) => Ok(n as u64),
        Ok(n) => Err(format!("must be a whole number from 0 to 2^53, got {n}")),
        Err(_) => Err(format!("must be a whole number from 0 to 2^53, got `{s}`")),
    }
}

fn positive_u32(s: &str) -> Result<u32, String> {
    let n = positive(s)?;
    u32::try_from(n).map_err(|_| format!("must be at most {}, got {n}", u32::MAX))
}
