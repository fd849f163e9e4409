//! `spillway serve`: the configuration from every source, logging, then the service
//! (`spillway_server::App`: it waits for the store while it is unreachable) until
//! SIGTERM or SIGINT, when it stops accepting and drains what is in flight.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use spillway_server::config::{self, Resolved, Sources};
use spillway_server::otel::Otel;
use spillway_server::{App, StartError};
use tokio_util::sync::CancellationToken;

use crate::args;

pub const EXAMPLES: &str = "\
Settings come from, later winning: defaults, --settings FILE, the Envoy reference
service's variables (REDIS_URL, REDIS_TYPE, RUNTIME_ROOT, PORT, GRPC_PORT, LOG_LEVEL,
SHADOW_MODE, LIMIT_RESPONSE_HEADERS_ENABLED, ...), then flags and SPILLWAY_* variables.
Every setting: docs/reference/settings.md; the ones in force: spillway config.

Examples:
  # The example policies on the in-memory store (HTTP :8080, gRPC :8081 on every
  # interface; the console and other operator pages on 127.0.0.1:6070)
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

#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// A settings file (YAML, `setting: value`; every key: docs/reference/settings.md).
    #[arg(long, env = "SPILLWAY_SETTINGS", value_name = "FILE")]
    pub settings: Option<PathBuf>,

    #[command(flatten)]
    pub flags: args::SettingFlags<args::All>,
}

impl ServeArgs {
    /// The configuration these flags, the settings file and the environment make.
    pub fn resolve(self) -> anyhow::Result<Resolved> {
        Ok(Sources {
            file: self.settings,
            env: environment(),
            flags: self.flags.given,
            called_ratelimit: crate::called_ratelimit(),
        }
        .resolve()?)
    }
}

/// The environment's variables that are text.
pub fn environment() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let resolved = args.resolve()?;
    let config = resolved.config;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = config.service.worker_threads {
        runtime.worker_threads(n);
    }
    let runtime = runtime.enable_all().build()?;
    // The OTLP exporter's gRPC client lives on the runtime: it is built within it.
    let otel = {
        let _in = runtime.enter();
        Otel::new(&config.tracing).map_err(anyhow::Error::msg)?
    };
    init_logging(&config.log, otel.as_ref())?;
    if let (Some(_), Some(endpoint)) = (&otel, &config.tracing.endpoint) {
        tracing::info!(%endpoint, protocol = ?config.tracing.protocol, "tracing: a span per decision over OTLP");
    }
    // At debug: the startup lines the docs show stay what they are on every machine.
    tracing::debug!(
        workers = runtime.metrics().num_workers(),
        "runtime: worker threads serving requests"
    );
    let env = environment();
    for (variable, why) in config::not_honoured(&env) {
        tracing::warn!(%variable, why, "a setting of the reference service is set and not honoured");
    }
    if resolved.profile == config::Profile::Reference
        && let Some(defaults) = config::unreproduced_defaults(&env)
    {
        tracing::info!(%defaults, "the reference's defaults Spillway does not take");
    }
    if config.store.url != "memory"
        && config.store.redis.tls.verify == spillway_redis::Verify::Insecure
    {
        tracing::warn!(
            "Redis TLS verifies nothing (redis_tls_verify: none): anyone on the path can pose \
             as Redis; use it for tests only"
        );
    }
    let served = runtime.block_on(async {
        let stop = CancellationToken::new();
        tokio::spawn({
            let stop = stop.clone();
            async move {
                signal().await;
                tracing::info!("shutting down: draining requests in flight");
                stop.cancel();
            }
        });
        let app = match App::builder(config)
            .wait_for_store(stop.clone())
            .build()
            .await
        {
            Ok(app) => app,
            Err(StartError::Stopped) => return Ok(ExitCode::SUCCESS),
            Err(e) => return Err(e.into()),
        };
        let listeners = app.bind().await?;
        app.serve(listeners, stop).await?.wait().await;
        Ok(ExitCode::SUCCESS)
    });
    // The spans still buffered go before the process does.
    if let Some(otel) = otel {
        otel.shutdown();
    }
    served
}

/// Log lines as `log` says, filtered by its level; and, with tracing on, the decisions'
/// spans to the exporter (each layer with its own filter: the spans, at TRACE under a
/// target of their own, are created only when the exporter is there to take them).
fn init_logging(log: &config::Log, otel: Option<&Otel>) -> anyhow::Result<()> {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_new(&log.level)
        .with_context(|| format!("log level `{}`", log.level))?;
    let color = log
        .color
        .unwrap_or_else(|| std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(color)
        .with_writer(|| LossyStderr);
    let fmt = if log.json {
        fmt.json().with_filter(filter).boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(otel.map(Otel::layer))
        .init();
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
