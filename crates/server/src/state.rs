//! What every endpoint shares: the service, the header settings, and whether the
//! service is ready; and building it from the settings ([`app_state`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use spillway_core::{Breaker, Clock, Store};
use spillway_policy::PolicySet;
use tokio::sync::mpsc;

use crate::api::headers::HeaderOptions;
use crate::metrics;
use crate::service::candidate::{BATCH, GATHER, QUEUE};
use crate::service::request::{CheckRequest, CheckResponse, Code};
use crate::service::{CheckError, Options, Service};
use crate::settings::{self, Settings};
use crate::store::{AnyStore, Stores};

/// A request for the candidate set, with the live answer (`true`: admitted).
type ForCandidate = (CheckRequest, bool);

/// What every endpoint shares.
#[derive(Debug)]
pub struct AppState {
    pub service: Service,
    pub headers: HeaderOptions,
    pub shutting_down: AtomicBool,
    /// The last policy load; subscribe to hear of reloads.
    pub load_status: tokio::sync::watch::Sender<LoadStatus>,
    /// The last candidate policy load (`--candidate-config`), if there is a candidate.
    pub candidate_status: tokio::sync::watch::Sender<LoadStatus>,
    /// How long an HTTP client may take to send a request's body, all of it (the
    /// header read timeout, again).
    pub body_read_timeout: Duration,
    /// Whether `/ui` serves the console page.
    pub ui: bool,
    /// How a reload reads the policy files.
    pub load_options: spillway_policy::LoadOptions,
    /// Requests waiting for the candidate set: made, with the thread that takes them, at
    /// the first request that needs it.
    pub(crate) candidate_queue: OnceLock<mpsc::Sender<ForCandidate>>,
    /// Rules come over xDS and none have arrived yet, and the service was not told to
    /// be ready without them (`FORCE_START_WITHOUT_INITIAL_CONFIG`): not ready.
    pub waiting_for_rules: AtomicBool,
    /// Not ready while no domain is loaded (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub ready_needs_a_domain: bool,
    /// The decision counters over the last minutes, for the console's charts.
    pub history: crate::history::History,
}

impl AppState {
    /// A set of rules is in force (over xDS): no longer waiting for the first.
    pub(crate) fn rules_arrived(&self) {
        self.waiting_for_rules.store(false, Ordering::Relaxed);
    }

    /// Decides `req` for an API; then, without holding up the answer, queues it for the
    /// candidate policies (if any) to decide in shadow.
    pub(crate) async fn check(
        self: &Arc<Self>,
        req: CheckRequest,
    ) -> Result<CheckResponse, CheckError> {
        let answer = self.service.check(&req).await?;
        if self.service.has_candidate() {
            let live_allowed = answer.overall == Code::Ok;
            let queue = self
                .candidate_queue
                .get_or_init(|| candidate_thread(Arc::downgrade(self)));
            if queue.try_send((req, live_allowed)).is_err() {
                metrics::candidate_dropped();
            }
        }
        Ok(answer)
    }

    pub(crate) async fn readiness(&self) -> Result<(), String> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err("shutting down".into());
        }
        if self.waiting_for_rules.load(Ordering::Relaxed) {
            return Err("waiting for the first rules over xDS".into());
        }
        if self.ready_needs_a_domain && self.service.policies().domains().is_empty() {
            return Err("no domain loaded".into());
        }
        self.service
            .stores()
            .store()
            .ping()
            .await
            .map_err(|e| format!("store unreachable: {e}"))
    }
}

/// The candidate's queue, and the thread that empties it: a thread of its own at the
/// lowest CPU priority there is (`SCHED_IDLE` on Linux), so the candidate only ever gets
/// CPU time the live traffic leaves. On a saturated machine it falls behind, its queue
/// fills, and what does not fit is dropped and counted, instead of taking CPU from
/// live answers. (A task spawned per request on the live runtime cost the live path
/// 15-19% of its throughput on two cores; docs/operating.md has the figures.)
fn candidate_thread(state: Weak<AppState>) -> mpsc::Sender<ForCandidate> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let started = std::thread::Builder::new()
        .name("spillway-candidate".into())
        .spawn(move || {
            lowest_priority();
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(decide_candidates(state, rx)),
                Err(e) => tracing::error!(error = %e, "the candidate set cannot run"),
            }
        });
    if let Err(e) = started {
        tracing::error!(error = %e, "the candidate set cannot run");
    }
    tx
}

/// This thread runs only when no other thread wants the CPU.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
            set_thread_priority_and_policy, thread_native_id,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(e) =
            set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle)
        {
            tracing::warn!(error = ?e, "the candidate thread keeps the normal CPU priority");
        }
    }
}

/// Takes queued requests up to [`BATCH`] at a time and decides them together, until
/// the state is gone.
async fn decide_candidates(state: Weak<AppState>, mut queue: mpsc::Receiver<ForCandidate>) {
    let mut batch = Vec::with_capacity(BATCH);
    while queue.recv_many(&mut batch, BATCH).await > 0 {
        let Some(state) = state.upgrade() else { return };
        let full = batch.len() == BATCH;
        state.service.candidate_check(&batch).await;
        batch.clear();
        drop(state);
        if !full {
            // Let the next batch gather rather than wake this task for every request.
            tokio::time::sleep(GATHER).await;
        }
    }
}

/// What the last load did.
#[derive(Clone, Debug, Default)]
pub struct LoadStatus {
    /// Loads so far, good or bad (the first at startup included).
    pub generation: u64,
    /// The last load's errors, if it failed.
    pub error: Option<String>,
}

/// The shared state of the endpoints, without listeners: for [`start`](crate::start), and for tests
/// that drive [`http_app`](crate::http_app) in process.
pub fn app_state(
    settings: &Settings,
    policies: PolicySet,
    store: AnyStore,
    clock: Arc<dyn Clock>,
) -> Arc<AppState> {
    metrics::handle(); // installs the recorder before anything is counted
    metrics::config_load(true, policies.domains().len());
    // Logged as the crate, as it was before this moved out of lib.rs.
    tracing::info!(
        target: "spillway_server",
        store = store.kind(),
        domains = policies.domains().len(),
        "starting"
    );
    let breaker = Breaker::new(settings.breaker_failures, settings.breaker_cooldown);
    metrics::breaker(breaker.state());
    let options = Options {
        global_shadow: settings.shadow_mode,
        global_quota: settings.quota_mode,
        on_store_error: settings.on_store_error,
        near_limit_ratio: settings.near_limit_ratio,
        key_prefix: settings.key_prefix.clone(),
        stop_increment_when_over_limit: settings.stop_increment_when_over_limit,
        dynamic_metadata: settings.dynamic_metadata,
    };
    let mut service = Service::new(policies, stores(store, breaker, settings), clock, options);
    let mut candidate_error = None;
    if let Some(path) = &settings.candidate_config {
        // A candidate that does not load never stops the service: it is reported.
        let candidate = spillway_policy::load_with(path, settings.load_options()).unwrap_or_else(|e| {
            tracing::error!(path = %path.display(), error = %e, "candidate policies not loaded");
            candidate_error = Some(e.to_string());
            PolicySet::default()
        });
        service = service.with_candidate(candidate);
    }
    Arc::new(AppState {
        service,
        history: crate::history::History::default(),
        headers: HeaderOptions {
            style: settings.headers,
            reference: settings.reference_headers.clone(),
        },
        shutting_down: AtomicBool::new(false),
        body_read_timeout: settings.header_read_timeout,
        ui: settings.ui,
        load_options: settings.load_options(),
        candidate_queue: std::sync::OnceLock::new(),
        load_status: tokio::sync::watch::Sender::new(LoadStatus {
            generation: 1,
            error: None,
        }),
        candidate_status: tokio::sync::watch::Sender::new(LoadStatus {
            generation: u64::from(settings.candidate_config.is_some()),
            error: candidate_error,
        }),
        waiting_for_rules: AtomicBool::new(
            matches!(settings.rules, settings::Rules::Xds(_))
                && !settings.force_start_without_rules,
        ),
        ready_needs_a_domain: settings.ready_needs_a_domain,
    })
}

/// The store, guarded; the deny cache as the settings size it. A store in this process
/// has none (there is no round trip to save) unless the reference's local cache is
/// asked for: then reference counters stop growing past their limit on every store.
fn stores(store: AnyStore, breaker: Breaker, settings: &Settings) -> Stores {
    let stores = Stores::new(store, breaker);
    if stores.store().is_local() && !settings.reference_local_cache {
        return stores;
    }
    stores
        .deny_cache(settings.deny_cache_bytes)
        .deny_cache_counting(settings.reference_local_cache)
}
