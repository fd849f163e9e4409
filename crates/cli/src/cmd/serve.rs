//! `spillway serve`: settings from every source, logging, the store (waited for while
//! it is unreachable), then the service until SIGTERM or SIGINT, when it stops
//! accepting and drains what is in flight.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use spillway_core::SystemClock;
use spillway_policy::OnStoreError;
use spillway_policy::duration;
use spillway_server::{AnyStore, HeaderStyle, Settings, settings};
use tokio_util::sync::CancellationToken;

use crate::args;

pub const EXAMPLES: &str = "\
Settings come from, later winning: defaults, --settings FILE, the Envoy reference
service's variables (REDIS_URL, REDIS_TYPE, RUNTIME_ROOT, PORT, GRPC_PORT, LOG_LEVEL,
SHADOW_MODE, LIMIT_RESPONSE_HEADERS_ENABLED, ...), then flags and SPILLWAY_* variables.

Examples:
  # The example policies on the in-memory store (HTTP :8080, gRPC :8081; the console
  # and other operator pages on 127.0.0.1:6070)
  spillway serve --config examples/policies

  # TLS on both check ports; mutual TLS with a client CA (health probes need no
  # client certificate)
  spillway serve --config /etc/spillway --tls-cert tls.crt --tls-key tls.key \\
      --tls-client-ca clients-ca.crt

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

    /// Candidate policies (a file or directory) decided in shadow on the same traffic,
    /// on counters of their own, answering nobody: see spillway_candidate_* in /metrics.
    #[arg(long, env = "SPILLWAY_CANDIDATE_CONFIG")]
    pub candidate_config: Option<PathBuf>,

    /// Where counters live: `memory`, or a Redis URL (redis://, rediss://, unix://,
    /// redis+cluster://host:port,..., redis+sentinel://host:port,.../master).
    #[arg(long, env = "SPILLWAY_STORE")]
    pub store: Option<String>,

    /// HTTP listen address (/v1/check, /json, /metrics, /healthz, /readyz, /healthcheck).
    #[arg(long, env = "SPILLWAY_HTTP_ADDR")]
    pub http_addr: Option<String>,

    /// gRPC listen address (ShouldRateLimit, health).
    #[arg(long, env = "SPILLWAY_GRPC_ADDR")]
    pub grpc_addr: Option<String>,

    /// Admin listen address (/ui, /v1/top, /v1/config, /v1/explain, /rlconfig), or
    /// `off`. Default 127.0.0.1:6070: loopback only.
    #[arg(long, env = "SPILLWAY_ADMIN_ADDR")]
    pub admin_addr: Option<String>,

    /// A file whose first line is the admin listener's token: requests without it
    /// (Authorization: Bearer, or Basic with it as password) get 401; health needs none.
    #[arg(long, env = "SPILLWAY_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,

    #[command(flatten)]
    pub tls: args::ServeTls,

    #[command(flatten)]
    pub xds: args::Xds,

    /// A settings file (YAML; the keys are these flags' names with underscores).
    #[arg(long, env = "SPILLWAY_SETTINGS")]
    pub settings: Option<PathBuf>,

    /// Give up on a store call after this long (default 10ms).
    #[arg(long, env = "SPILLWAY_STORE_TIMEOUT", value_parser = duration::parse)]
    pub store_timeout: Option<Duration>,

    /// For rules without their own: open (admit), closed (503 / UNAVAILABLE), local
    /// (an in-process limiter). Default closed, as the reference answers an error.
    #[arg(long, env = "SPILLWAY_ON_STORE_ERROR", value_parser = args::named::<OnStoreError>)]
    pub on_store_error: Option<OnStoreError>,

    /// /v1/check's rate limit headers: ietf, legacy, x-ratelimit, none.
    #[arg(long, env = "SPILLWAY_HEADERS", value_parser = args::named::<HeaderStyle>)]
    pub headers: Option<HeaderStyle>,

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

    /// Send every decision to the store: no local answers for keys the store denied
    /// until a known time (the deny cache; on by default with Redis).
    #[arg(long, env = "SPILLWAY_NO_DENY_CACHE")]
    pub no_deny_cache: bool,

    /// Do not serve the console page (/ui).
    #[arg(long, env = "SPILLWAY_NO_UI")]
    pub no_ui: bool,

    #[command(flatten)]
    pub redis: args::RedisAccess,
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let settings = resolve(args)?;
    init_logging(&settings)?;
    for (variable, why) in settings::not_honoured(std::env::vars()) {
        tracing::warn!(%variable, why, "a setting of the reference service is set and not honoured");
    }
    if settings.store != "memory" && settings.redis.tls.verify == spillway_redis::Verify::Insecure {
        tracing::warn!(
            "Redis TLS verifies nothing (redis_tls_verify: none): anyone on the path can pose \
             as Redis; use it for tests only"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let stop = CancellationToken::new();
        tokio::spawn({
            let stop = stop.clone();
            async move {
                signal().await;
                tracing::info!("shutting down: draining requests in flight");
                stop.cancel();
            }
        });
        // A typo in a policy file fails at once, before any wait for the store.
        let policies = spillway_server::initial_policies(&settings)?;
        let Some(store) = open_store(&settings, &stop).await? else {
            return Ok(ExitCode::SUCCESS); // stopped while waiting for the store
        };
        // The OS clock, not the coarse one: see `spillway_server::start`.
        let clock = Arc::new(SystemClock);
        let running =
            spillway_server::start_with_policies(&settings, policies, store, clock).await?;
        let shutdown = running.shutdown.clone();
        tokio::spawn(async move {
            stop.cancelled().await;
            shutdown.cancel();
        });
        running.wait().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Opens the store; while it is unreachable, tries again with backoff (1 s doubling to
/// 30 s), as the reference service waits for Redis at startup. A bad URL fails at once.
async fn open_store(
    settings: &Settings,
    stop: &CancellationToken,
) -> anyhow::Result<Option<AnyStore>> {
    let mut backoff = Duration::from_secs(1);
    loop {
        match AnyStore::open(&settings.store, settings.store_timeout, &settings.redis).await {
            Ok(store) => return Ok(Some(store)),
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, retry_in = ?backoff, "store unreachable; waiting for it");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stop.cancelled() => return Ok(None),
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(e) => return Err(e).context("store"),
        }
    }
}

/// Defaults, then the settings file, then the reference's variables, then flags.
fn resolve(args: ServeArgs) -> anyhow::Result<Settings> {
    let mut s = Settings::default();
    if let Some(file) = &args.settings {
        s.apply_file(file)?;
    }
    s.apply_reference_env(|k| std::env::var(k).ok())?;
    if let Some(v) = args.config {
        s.config = v;
    }
    if let Some(v) = args.candidate_config {
        s.candidate_config = Some(v);
    }
    if let Some(v) = args.store {
        s.store = v;
    }
    args.redis.apply(&mut s.redis)?;
    if let Some(v) = args.http_addr {
        s.http_addr = settings::addr(&v)
            .map_err(anyhow::Error::msg)
            .context("--http-addr")?;
    }
    if let Some(v) = args.grpc_addr {
        s.grpc_addr = settings::addr(&v)
            .map_err(anyhow::Error::msg)
            .context("--grpc-addr")?;
    }
    if let Some(v) = args.admin_addr {
        s.admin_addr = settings::admin_addr(&v)
            .map_err(anyhow::Error::msg)
            .context("--admin-addr")?;
    }
    if let Some(v) = args.admin_token_file {
        s.admin_token = Some(
            settings::password_file(&v)
                .map_err(anyhow::Error::msg)
                .context("--admin-token-file")?,
        );
    }
    args.tls.apply(&mut s);
    args.xds.apply(&mut s)?;
    if let Some(v) = args.store_timeout {
        s.store_timeout = v;
    }
    if let Some(v) = args.on_store_error {
        s.on_store_error = v;
    }
    if let Some(v) = args.headers {
        s.headers = v;
    }
    s.shadow_mode |= args.shadow_mode;
    if let Some(v) = args.log_level {
        s.log_level = v;
    }
    if let Some(v) = args.log_format {
        s.log_json = settings::log_format(&v)
            .map_err(anyhow::Error::msg)
            .context("--log-format")?;
    }
    s.watch &= !args.no_watch;
    s.ui &= !args.no_ui;
    if args.no_deny_cache {
        s.deny_cache_bytes = 0;
    }
    Ok(s)
}

fn init_logging(s: &Settings) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(&s.log_level)
        .with_context(|| format!("log level `{}`", s.log_level))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr);
    if s.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
    Ok(())
}

/// stderr, its write errors dropped. When whatever reads the log goes away, a failed
/// write must not stop the service: tracing-subscriber reports a failed write with
/// `eprintln!`, which panics on a closed stderr, in whichever task logged (seen: the
/// shutdown task, so SIGTERM no longer stopped `serve`).
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

async fn signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
