//! The Spillway service: Envoy's gRPC rate limit protocol and an HTTP/JSON API over the
//! policies of `spillway-policy` and a store (memory, or Redis), with failure policies,
//! a circuit breaker, hot reload, Prometheus metrics and graceful shutdown.
//!
//! ```text
//! api/grpc.rs      (ShouldRateLimit) ┐                     ┌ store.rs: core's GuardedStore
//! api/v1.rs        (/v1/check)       ├> service.rs: match ─┤   over memory | Redis
//! api/reference.rs (/json)           ┘   rules, decide,    └ metrics.rs
//!                                        aggregate
//! ```
//!
//! [`start`] binds the listeners and returns at once (tests bind port 0): gRPC, HTTP
//! (the check APIs, health, metrics) and the admin listener (the console, top keys,
//! config, explain, `/rlconfig`; loopback by default), each over TLS when asked
//! (`tls.rs`, certificates reloaded without a restart). The rules come from policy files
//! (`reload.rs` watches them) or over xDS (`xds.rs`); `history.rs` keeps the last
//! minutes of the decision counters for the console's charts. [`Running::wait`] serves until the
//! shutdown token is cancelled, then drains.

#![forbid(unsafe_code)]
// The decision future nests the Redis client's futures inside tokio::join!; its layout
// needs more than the default query depth.
#![recursion_limit = "256"]

mod api;
#[doc(hidden)]
pub mod ceiling;
mod history;
pub mod listen;
pub mod metrics;
mod reload;
mod service;
pub mod settings;
mod state;
mod store;
pub mod tls;
mod top;
pub mod xds;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use spillway_core::{Clock, SystemClock};
use spillway_policy::PolicySet;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use api::decode;
pub use api::headers::HeaderOptions;
pub use service::request::{
    CheckRequest, CheckResponse, Code, Descriptor, MAX_DESCRIPTORS, MAX_DOMAIN_LEN, MAX_ENTRIES,
    Override, ReportedRule, Status,
};
pub use service::{
    CheckError, DeniedBy, DescriptorExplanation, Explanation, LimitExplanation, LimitState,
    Options, PathStep, Service,
};
pub use settings::{Settings, SettingsError};
pub use spillway_core::headers::HeaderStyle;
pub use spillway_core::{Breaker, BreakerState};
pub use state::{AppState, LoadStatus, app_state};
pub use store::{AnyStore, Stores};
pub use top::{Heavy, RuleTop};

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("policies: {0}")]
    Policies(#[from] spillway_policy::Errors),
    #[error("store: {0}")]
    Store(#[from] spillway_redis::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot watch {path}: {source}")]
    Watch { path: String, source: notify::Error },
    #[error("TLS: {0}")]
    Tls(String),
}

/// A started service.
#[derive(Debug)]
pub struct Running {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    /// `None` when the admin listener is off.
    pub admin_addr: Option<SocketAddr>,
    /// The Prometheus listener (`USE_PROMETHEUS`), when asked for.
    pub metrics_addr: Option<SocketAddr>,
    /// The served certificates, when a listener speaks TLS.
    pub tls: Option<Arc<tls::Certs>>,
    pub state: Arc<AppState>,
    pub shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Serves until the shutdown token is cancelled and requests in flight have finished.
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// Begins a graceful shutdown and waits for it.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.wait().await;
    }
}

/// Loads the policies, opens the store, binds both listeners and starts serving.
pub async fn start(settings: &Settings) -> Result<Running, StartError> {
    // The OS clock: a request here costs tens of µs, so reading it (~30 ns) is noise,
    // and the memory store and the `local` fallback stay exact against wall time.
    start_with_clock(settings, Arc::new(SystemClock)).await
}

/// [`start`] with a clock (tests pass a manual one).
pub async fn start_with_clock(
    settings: &Settings,
    clock: Arc<dyn Clock>,
) -> Result<Running, StartError> {
    // Policies first: a typo in a file should not wait for a store connection to show.
    let policies = initial_policies(settings)?;
    let store = AnyStore::open(&settings.store, settings.store_timeout, &settings.redis).await?;
    start_with_policies(settings, policies, store, clock).await
}

/// [`start`] with a store already open (tests pass one that reads the manual clock).
pub async fn start_with_store(
    settings: &Settings,
    store: AnyStore,
    clock: Arc<dyn Clock>,
) -> Result<Running, StartError> {
    let policies = initial_policies(settings)?;
    start_with_policies(settings, policies, store, clock).await
}

/// The policies to start with: the files', or with rules over xDS none (until the
/// first set arrives).
pub fn initial_policies(settings: &Settings) -> Result<PolicySet, spillway_policy::Errors> {
    match settings.rules {
        settings::Rules::Files => {
            spillway_policy::load_with(&settings.config, settings.load_options())
        }
        settings::Rules::Xds(_) => Ok(PolicySet::default()),
    }
}

/// [`start`] with the policies loaded and the store open (`serve` loads the policies
/// before it waits for the store).
pub async fn start_with_policies(
    settings: &Settings,
    policies: PolicySet,
    store: AnyStore,
    clock: Arc<dyn Clock>,
) -> Result<Running, StartError> {
    // TLS first: a setting that cannot be honoured stops the start, never plaintext.
    let certs = match settings
        .tls_files()
        .map_err(|e| StartError::Tls(e.to_string()))?
    {
        Some(files) => Some(tls::Certs::load(files).map_err(StartError::Tls)?),
        None => None,
    };
    let state = app_state(settings, policies, store, clock);
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Listen { addr, source })
    };
    let (http, grpc) = (
        bind(settings.http_addr).await?,
        bind(settings.grpc_addr).await?,
    );
    let admin = match settings.admin_addr {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let prometheus = match settings.metrics_addr {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let metrics_addr = prometheus.as_ref().map(local);
    let (http_addr, grpc_addr) = (local(&http), local(&grpc));
    let admin_addr = admin.as_ref().map(local);

    let shutdown = CancellationToken::new();
    let live_files = matches!(settings.rules, settings::Rules::Files);
    if let settings::Rules::Xds(xds) = &settings.rules {
        xds::spawn(Arc::clone(&state), (**xds).clone(), shutdown.clone());
    }
    if settings.watch {
        let live = live_files.then(|| (settings.config.clone(), reload::Set::Live));
        let watched = live.into_iter().chain(
            settings
                .candidate_config
                .clone()
                .map(|p| (p, reload::Set::Candidate)),
        );
        for (path, set) in watched {
            reload::watch(Arc::clone(&state), path.clone(), set, shutdown.clone()).map_err(
                |source| StartError::Watch {
                    path: path.display().to_string(),
                    source,
                },
            )?;
        }
    }
    if let Some(certs) = &certs {
        reload::watch_tls(Arc::clone(certs), shutdown.clone()).map_err(|source| {
            StartError::Watch {
                path: certs
                    .paths()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                source,
            }
        })?;
    }

    let (reporter, health) = tonic_health::server::health_reporter();
    // Registered before the port opens (not serving until the first readiness check), so
    // a health check never finds the names missing.
    api::grpc::set_health(&reporter, false).await;
    let timeouts = listen::Timeouts {
        header_read: settings.header_read_timeout,
        drain: settings.drain_timeout,
    };
    let http_app = api::router::router(Arc::clone(&state));
    let grpc_app = api::grpc::router(Arc::clone(&state), health);
    let admin_app = api::router::admin_router(
        Arc::clone(&state),
        settings.admin_token.as_ref().map(|t| Arc::from(t.expose())),
    );
    let metrics_app = api::router::metrics_router(&settings.metrics_path);
    let on = settings.tls_on();
    let listener_tls = |enabled: bool, strict: bool, name: &'static str| {
        certs
            .as_ref()
            .filter(|_| enabled)
            .map(|certs| listen::ListenerTls {
                certs: Arc::clone(certs),
                strict,
                name,
            })
    };
    let (http_tls, grpc_tls, admin_tls) = (
        listener_tls(on.http, false, "http"),
        listener_tls(on.grpc, true, "grpc"),
        listener_tls(on.admin, false, "admin"),
    );
    let task = tokio::spawn({
        let (state, shutdown) = (Arc::clone(&state), shutdown.clone());
        async move {
            let upkeep = tokio::spawn(upkeep(Arc::clone(&state), reporter, shutdown.clone()));
            let sync = tokio::spawn(sync(Arc::clone(&state)));
            let admin = async {
                if let Some(admin) = admin {
                    listen::serve(admin, admin_app, shutdown.clone(), timeouts, admin_tls).await;
                }
            };
            let prometheus = async {
                if let Some(listener) = prometheus {
                    listen::serve(listener, metrics_app, shutdown.clone(), timeouts, None).await;
                }
            };
            tokio::join!(
                listen::serve(http, http_app, shutdown.clone(), timeouts, http_tls),
                listen::serve(grpc, grpc_app, shutdown.clone(), timeouts, grpc_tls),
                admin,
                prometheus,
            );
            upkeep.abort();
            sync.abort();
            tracing::info!("stopped");
        }
    });
    tracing::info!(
        %http_addr,
        %grpc_addr,
        admin_addr = admin_addr.map_or("off".to_owned(), |a| a.to_string()),
        tls = %on,
        "listening"
    );
    if let Some(addr) = metrics_addr {
        tracing::info!(%addr, path = %settings.metrics_path, "Prometheus listening");
    }
    Ok(Running {
        http_addr,
        grpc_addr,
        admin_addr,
        metrics_addr,
        tls: certs,
        state,
        shutdown,
        task,
    })
}

/// The check port's HTTP routes over `state` (`/v1/check`, `/json`, health, metrics).
pub fn http_app(state: Arc<AppState>) -> axum::Router {
    api::router::router(state)
}

/// The admin listener's routes over `state` (`/ui`, `/v1/top`, `/v1/config`,
/// `/v1/explain`, `/rlconfig`, health, metrics), without a token.
pub fn admin_app(state: Arc<AppState>) -> axum::Router {
    api::router::admin_router(state, None)
}

fn local(l: &TcpListener) -> SocketAddr {
    l.local_addr().expect("a bound listener has an address")
}

/// The `sync` limits' counts that are due go to the store, every `MIN_SYNC`.
async fn sync(state: Arc<AppState>) {
    spillway_core::sharing::every_tick(|| {
        let state = Arc::clone(&state);
        async move {
            state.service.flush().await;
            true
        }
    })
    .await;
}

/// Once a second: the gRPC health status follows readiness, and the Prometheus
/// recorder's histograms are maintained. On shutdown: not serving, at once.
async fn upkeep(
    state: Arc<AppState>,
    reporter: tonic_health::server::HealthReporter,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let ready = state.readiness().await.is_ok();
                api::grpc::set_health(&reporter, ready).await;
                metrics::handle().run_upkeep();
                state.history.sample(|| metrics::handle().render(), state.service.now());
                metrics::breaker(state.service.stores().breaker().state());
            }
            () = shutdown.cancelled() => {
                state.shutting_down.store(true, Ordering::Relaxed);
                api::grpc::set_health(&reporter, false).await;
                return;
            }
        }
    }
}
