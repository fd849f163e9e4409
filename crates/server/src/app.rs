//! The composition root: a [`Config`] becomes a running service, in the order it reads.
//!
//! 1. [`App::builder`]`(config)...`[`build`](AppBuilder::build): the policies (a typo
//!    fails at once, before any wait for the store), the served certificates (a TLS
//!    setting that cannot be honoured stops the start, never plaintext), the store (waited
//!    for with backoff while unreachable, when asked), then the shared state.
//! 2. [`App::bind`]: every listener the configuration names (tests give port 0).
//! 3. [`App::serve`]: the rules' source (file watchers or the xDS client), the
//!    certificates' watcher, the listeners and the upkeep tasks, until the shutdown token
//!    is cancelled; then it drains.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use spillway_core::{Breaker, Clock, Store, SystemClock};
use spillway_policy::PolicySet;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::service::{Options, Service};
use crate::state::{AppState, LoadStatus};
use crate::store::{AnyStore, Stores};
use crate::{api, listen, metrics, reload, tls, xds};

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
    /// Stopped while waiting for the store.
    #[error("stopped while waiting for the store")]
    Stopped,
}

/// A service built and ready to listen.
#[derive(Debug)]
pub struct App {
    config: Config,
    state: Arc<AppState>,
    certs: Option<Arc<tls::Certs>>,
}

/// What [`App::build`](AppBuilder::build) starts from besides the configuration.
#[must_use]
pub struct AppBuilder {
    config: Config,
    store: Option<AnyStore>,
    clock: Arc<dyn Clock>,
    wait_for_store: Option<CancellationToken>,
}

/// The listeners of one service, bound.
#[derive(Debug)]
pub struct Listeners {
    pub http: TcpListener,
    pub grpc: TcpListener,
    pub admin: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
}

/// A started service.
#[derive(Debug)]
pub struct Running {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    /// `None` when the admin listener is off.
    pub admin_addr: Option<SocketAddr>,
    /// The Prometheus listener (`metrics_addr`), when asked for.
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

// === impl AppBuilder ===

impl std::fmt::Debug for AppBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AppBuilder {
    /// A store already open (tests pass one that reads the manual clock); by default
    /// the configuration's is opened.
    pub fn store(mut self, store: AnyStore) -> AppBuilder {
        self.store = Some(store);
        self
    }

    /// The clock (tests pass a manual one). By default the OS clock: a request costs
    /// tens of µs, so reading it (~30 ns) is noise, and the memory store and the `local`
    /// fallback stay exact against wall time.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> AppBuilder {
        self.clock = clock;
        self
    }

    /// While the store is unreachable, try again with backoff (1 s doubling to 30 s, as
    /// the reference waits for Redis at startup) until `stop` is cancelled; without it,
    /// an unreachable store fails the build.
    pub fn wait_for_store(mut self, stop: CancellationToken) -> AppBuilder {
        self.wait_for_store = Some(stop);
        self
    }

    /// Loads the policies, the certificates and the store, and builds the shared state.
    pub async fn build(self) -> Result<App, StartError> {
        let config = self.config;
        let policies = match config.xds() {
            // Rules over xDS: none until the first set arrives.
            Some(_) => PolicySet::default(),
            None => spillway_policy::load_with(&config.rules.path, config.load_options())?,
        };
        let certs = match config
            .tls_files()
            .map_err(|e| StartError::Tls(e.to_string()))?
        {
            Some(files) => Some(tls::Certs::load(files).map_err(StartError::Tls)?),
            None => None,
        };
        let store = match self.store {
            Some(store) => store,
            None => open_store(&config, self.wait_for_store.as_ref()).await?,
        };
        let state = state(&config, policies, store, self.clock);
        Ok(App {
            config,
            state,
            certs,
        })
    }
}

/// Opens the configuration's store; with `stop`, waits while it is unreachable. A bad
/// URL fails at once.
async fn open_store(
    config: &Config,
    stop: Option<&CancellationToken>,
) -> Result<AnyStore, StartError> {
    let mut backoff = Duration::from_secs(1);
    loop {
        let store = &config.store;
        match AnyStore::open(&store.url, store.timeout, &store.redis).await {
            Ok(store) => return Ok(store),
            Err(e) if e.is_transient() && stop.is_some() => {
                tracing::warn!(error = %e, retry_in = ?backoff, "store unreachable; waiting for it");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stop.expect("checked above").cancelled() => return Err(StartError::Stopped),
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The shared state of the endpoints.
fn state(
    config: &Config,
    policies: PolicySet,
    store: AnyStore,
    clock: Arc<dyn Clock>,
) -> Arc<AppState> {
    metrics::handle(); // installs the recorder before anything is counted
    metrics::config_load(true, policies.domains().len());
    // Logged as the crate, as operators have read it since the start.
    tracing::info!(
        target: "spillway_server",
        store = store.kind(),
        domains = policies.domains().len(),
        "starting"
    );
    let s = &config.service;
    let options = Options {
        global_shadow: s.shadow_mode,
        global_quota: s.quota_mode,
        on_store_error: config.store.on_error,
        near_limit_ratio: s.near_limit_ratio,
        key_prefix: config.store.key_prefix.clone(),
        stop_increment_when_over_limit: s.stop_increment_when_over_limit,
        dynamic_metadata: s.dynamic_metadata,
    };
    let mut service = Service::new(policies, stores(config, store), clock, options);
    let mut candidate_error = None;
    if let Some(path) = &config.rules.candidate {
        // A candidate that does not load never stops the service: it is reported.
        let candidate = spillway_policy::load_with(path, config.load_options()).unwrap_or_else(|e| {
            tracing::error!(path = %path.display(), error = %e, "candidate policies not loaded");
            candidate_error = Some(e.to_string());
            PolicySet::default()
        });
        service = service.with_candidate(candidate);
    }
    let xds = config.xds();
    Arc::new(AppState {
        service: Arc::new(service),
        history: crate::history::History::default(),
        headers: config.headers.clone(),
        shutting_down: AtomicBool::new(false),
        body_read_timeout: config.listen.header_read_timeout,
        ui: config.admin.ui,
        load_options: config.load_options(),
        load_status: tokio::sync::watch::Sender::new(LoadStatus {
            generation: 1,
            error: None,
        }),
        candidate_status: tokio::sync::watch::Sender::new(LoadStatus {
            generation: u64::from(config.rules.candidate.is_some()),
            error: candidate_error,
        }),
        waiting_for_rules: AtomicBool::new(xds.is_some_and(|x| !x.ready_without_rules)),
        ready_needs_a_domain: config.rules.ready_needs_a_domain,
    })
}

/// The store, guarded by a breaker; the deny cache as configured. A store in this
/// process has none (there is no round trip to save) unless the reference's local cache
/// is asked for: then reference counters stop growing past their limit on every store.
fn stores(config: &Config, store: AnyStore) -> Stores {
    let s = &config.store;
    let breaker = Breaker::new(s.breaker_failures, s.breaker_cooldown);
    metrics::breaker(breaker.state());
    let stores = Stores::new(store, breaker);
    if stores.store().is_local() && !s.reference_local_cache {
        return stores;
    }
    stores
        .deny_cache(s.deny_cache_bytes)
        .deny_cache_counting(s.reference_local_cache)
}

// === impl App ===

impl App {
    /// A service from `config`; see [`AppBuilder`].
    pub fn builder(config: Config) -> AppBuilder {
        AppBuilder {
            config,
            store: None,
            clock: Arc::new(SystemClock),
            wait_for_store: None,
        }
    }

    /// What every endpoint shares (tests drive the routers over it in process).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Binds every listener the configuration names.
    pub async fn bind(&self) -> Result<Listeners, StartError> {
        async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Listen { addr, source })
        }
        async fn maybe(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, StartError> {
            match addr {
                Some(addr) => bind(addr).await.map(Some),
                None => Ok(None),
            }
        }
        let c = &self.config;
        Ok(Listeners {
            http: bind(c.listen.http).await?,
            grpc: bind(c.listen.grpc).await?,
            admin: maybe(c.admin.addr).await?,
            metrics: maybe(c.metrics.addr).await?,
        })
    }

    /// Binds and serves until the returned [`Running`]'s shutdown token is cancelled.
    pub async fn start(self) -> Result<Running, StartError> {
        let listeners = self.bind().await?;
        self.serve(listeners, CancellationToken::new()).await
    }

    /// Serves on `listeners` until `shutdown` is cancelled, then drains.
    pub async fn serve(
        self,
        listeners: Listeners,
        shutdown: CancellationToken,
    ) -> Result<Running, StartError> {
        let App {
            config,
            state,
            certs,
        } = self;
        sources(&config, &state, certs.as_ref(), &shutdown)?;
        let local = |l: &TcpListener| l.local_addr().expect("a bound listener has an address");
        let (http_addr, grpc_addr) = (local(&listeners.http), local(&listeners.grpc));
        let admin_addr = listeners.admin.as_ref().map(local);
        let metrics_addr = listeners.metrics.as_ref().map(local);

        let (reporter, health) = tonic_health::server::health_reporter();
        // Registered before the port opens (not serving until the first readiness check), so
        // a health check never finds the names missing.
        api::grpc::set_health(&reporter, false).await;
        let timeouts = listen::Timeouts {
            header_read: config.listen.header_read_timeout,
            drain: config.listen.drain_timeout,
        };
        let http_app = api::router::router(Arc::clone(&state));
        let grpc_app = api::grpc::router(Arc::clone(&state), health);
        let admin_app = api::router::admin_router(
            Arc::clone(&state),
            config.admin.token.as_ref().map(|t| Arc::from(t.expose())),
        );
        let metrics_app = api::router::metrics_router(&config.metrics.path);
        let on = config.tls_on();
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
        let Listeners {
            http,
            grpc,
            admin,
            metrics: prometheus,
        } = listeners;
        let task = tokio::spawn({
            let (state, shutdown) = (Arc::clone(&state), shutdown.clone());
            async move {
                let upkeep = tokio::spawn(upkeep(Arc::clone(&state), reporter, shutdown.clone()));
                let sync = tokio::spawn(sync(Arc::clone(&state)));
                let admin = async {
                    if let Some(admin) = admin {
                        listen::serve(admin, admin_app, shutdown.clone(), timeouts, admin_tls)
                            .await;
                    }
                };
                let prometheus = async {
                    if let Some(listener) = prometheus {
                        listen::serve(listener, metrics_app, shutdown.clone(), timeouts, None)
                            .await;
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
                tracing::info!(target: "spillway_server", "stopped");
            }
        });
        tracing::info!(
            target: "spillway_server",
            %http_addr,
            %grpc_addr,
            admin_addr = admin_addr.map_or("off".to_owned(), |a| a.to_string()),
            tls = %on,
            "listening"
        );
        if let Some(addr) = metrics_addr {
            tracing::info!(target: "spillway_server", %addr, path = %config.metrics.path, "Prometheus listening");
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
}

/// Where new rules and certificates come from while serving: the xDS client, or
/// watchers on the policy files (and the candidate's), and on the certificate files.
fn sources(
    config: &Config,
    state: &Arc<AppState>,
    certs: Option<&Arc<tls::Certs>>,
    shutdown: &CancellationToken,
) -> Result<(), StartError> {
    if let Some(x) = config.xds() {
        xds::spawn(Arc::clone(state), x.clone(), shutdown.clone());
    }
    if config.rules.watch {
        let live = config
            .xds()
            .is_none()
            .then(|| (config.rules.path.clone(), reload::Set::Live));
        let candidate = config
            .rules
            .candidate
            .clone()
            .map(|p| (p, reload::Set::Candidate));
        for (path, set) in live.into_iter().chain(candidate) {
            reload::watch(Arc::clone(state), path.clone(), set, shutdown.clone()).map_err(
                |source| StartError::Watch {
                    path: path.display().to_string(),
                    source,
                },
            )?;
        }
    }
    if let Some(certs) = certs {
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
    Ok(())
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
