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
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use spillway_core::{Breaker, Clock, Store, SystemClock};
use spillway_policy::PolicySet;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::service::{Options, Service};
use crate::state::{AppState, LoadStatus};
use crate::stats::Stats;
use crate::stats::mapper::Mapper;
use crate::store::{AnyStore, Stores};
use crate::{metrics, tls};

mod serve;
pub use serve::{Listeners, Running};

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
    #[error("cannot listen on {path}: {source}")]
    ListenUnix {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot watch {path}: {source}")]
    Watch { path: String, source: notify::Error },
    #[error("TLS: {0}")]
    Tls(String),
    /// The reference's stats cannot be kept as asked (an invalid mapping file).
    #[error("stats: {0}")]
    Stats(String),
    /// The overrides' journal could not be read.
    #[error("overrides: {0}")]
    Overrides(String),
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
    per_second: Option<AnyStore>,
    clock: Arc<dyn Clock>,
    wait_for_store: Option<CancellationToken>,
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

    /// A per-second store already open (tests pass one that reads the manual clock);
    /// by default the configuration's `per_second_store`, if set, is opened.
    pub fn per_second_store(mut self, store: AnyStore) -> AppBuilder {
        self.per_second = Some(store);
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
            None => open_store(&config.store, self.wait_for_store.as_ref()).await?,
        };
        let per_second = match (self.per_second, config.store.per_second()) {
            (Some(store), _) => Some(store),
            (None, Some(settings)) => {
                Some(open_store(&settings, self.wait_for_store.as_ref()).await?)
            }
            (None, None) => None,
        };
        let stats = stats(&config.stats).map_err(StartError::Stats)?;
        // On Redis, RLQS shares live there (Envoys on every replica share each
        // bucket), booked on a connection of their own.
        let ledger: Box<dyn crate::rlqs::Ledger> = match &store {
            AnyStore::Redis(redis) => {
                let own = redis.another(config.rlqs.store_timeout).await?;
                Box::new(crate::rlqs::RedisLedger::new(
                    own,
                    config.rlqs.store_timeout,
                    &config.store.key_prefix,
                ))
            }
            AnyStore::Memory(_) => Box::new(crate::rlqs::MemoryLedger::default()),
        };
        let quotas = crate::rlqs::Quotas::new(config.rlqs.clone(), ledger);
        // Overrides live where the store keeps state: in Redis (on a connection of
        // their own, with time for a page of them), else in a journal of this process.
        let kept = match &store {
            AnyStore::Redis(redis) => crate::limits::Kept::redis(
                redis.another(OVERRIDES_TIMEOUT).await?,
                &config.store.key_prefix,
            ),
            AnyStore::Memory(_) => crate::limits::Kept::journal(config.overrides_file()),
        };
        let state = state(
            &config,
            policies,
            (store, per_second),
            (quotas, kept),
            self.clock,
            stats,
        );
        // A journal that cannot be read stops the start: its overrides are limits. A
        // Redis that does not answer yet is tried again every poll.
        if let Err(e) = state.limits.load().await {
            match state.service.stores().store().is_local() {
                true => return Err(StartError::Overrides(e)),
                false => {
                    tracing::warn!(target: "spillway_server", error = %e, "overrides not loaded yet: the policies' rules apply until they are")
                }
            }
        }
        Ok(App {
            config,
            state,
            certs,
        })
    }
}

/// How long a call of the overrides' registry to Redis may take (a page of a full
/// load, a change): admin work, on a connection apart from the decisions'.
const OVERRIDES_TIMEOUT: Duration = Duration::from_secs(2);

/// Opens the store `store` describes; with `stop`, waits while it is unreachable. A
/// bad URL fails at once.
async fn open_store(
    store: &crate::config::Store,
    stop: Option<&CancellationToken>,
) -> Result<AnyStore, StartError> {
    let mut backoff = Duration::from_secs(1);
    loop {
        match AnyStore::open(store).await {
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
    (store, per_second): (AnyStore, Option<AnyStore>),
    (quotas, kept): (crate::rlqs::Quotas, crate::limits::Kept),
    clock: Arc<dyn Clock>,
    stats: Arc<Stats>,
) -> Arc<AppState> {
    metrics::handle(); // installs the recorder before anything is counted
    metrics::config_load(true, policies.domains().len());
    if config.xds().is_none() {
        stats.config_load(true);
    }
    // Logged as the crate, as operators have read it since the start.
    tracing::info!(
        target: "spillway_server",
        store = store.kind(),
        domains = policies.domains().len(),
        "starting"
    );
    let options = Options::of(config);
    if let Some(second) = &per_second {
        tracing::info!(
            target: "spillway_server",
            store = second.kind(),
            "rules whose window is one second decide on the per-second store"
        );
    }
    let mut service =
        Service::new(policies, stores(config, "main", store), clock, options).with_stats(stats);
    if let Some(url) = &config.service.alert_webhook {
        let alerts = crate::alerts::Alerts::webhook(url, config.service.alert_queue);
        service = service.with_alerts(alerts.expect("alert_webhook is checked when read"));
    }
    if let Some(second) = per_second {
        service = service.with_per_second(stores(config, "per_second", second));
    }
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
    let service = Arc::new(service);
    Arc::new(AppState {
        limits: Arc::new(crate::limits::Registry::new(Arc::clone(&service), kept)),
        service,
        history: crate::history::History::default(),
        headers: config.headers.clone(),
        grpc_callers: config.service.grpc_callers,
        http_callers: config.service.http_callers,
        waiters: tokio::sync::Semaphore::new(
            config
                .service
                .max_waiters
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        ),
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
        health_follows_store: config.store.health_follows_store,
        store_connected: AtomicBool::new(true),
        quotas,
    })
}

/// The reference's stats, as `settings` asks: Prometheus series named by the mapping
/// file (or the reference's default mapping), statsd, both or neither.
fn stats(settings: &crate::config::Stats) -> Result<Arc<Stats>, String> {
    let mapper = match (settings.reference_metrics, &settings.mapper) {
        (false, _) => None,
        (true, None) => Some(Mapper::reference()),
        (true, Some(path)) => Some(Mapper::from_file(path)?),
    };
    Ok(Arc::new(Stats::new(mapper, settings.statsd.is_some())))
}

/// The store, guarded by a breaker; the deny cache as configured. A store in this
/// process has none (there is no round trip to save) unless the reference's local cache
/// is asked for: then reference counters stop growing past their limit on every store.
fn stores(config: &Config, name: &'static str, store: AnyStore) -> Stores {
    let s = &config.store;
    let breaker = Breaker::tripping(s.trip(), s.breaker_cooldown);
    metrics::breaker(name, &breaker);
    let stores = Stores::new(store, breaker);
    if stores.store().is_local() && !s.reference_local_cache {
        return stores;
    }
    stores
        .deny_cache(s.deny_cache_bytes)
        .deny_cache_counting(s.reference_local_cache)
        .share_bytes(s.share_bytes)
}

// === impl App ===

impl App {
    /// A service from `config`; see [`AppBuilder`].
    pub fn builder(config: Config) -> AppBuilder {
        AppBuilder {
            config,
            store: None,
            per_second: None,
            clock: Arc::new(SystemClock),
            wait_for_store: None,
        }
    }

    /// What every endpoint shares (tests drive the routers over it in process).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }
}
