//! What every endpoint shares: the service, the header settings, and whether the
//! service is ready.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::api::headers::HeaderOptions;
use crate::metrics;
use crate::service::candidate::{BATCH, GATHER, QUEUE};
use crate::service::request::{CheckRequest, CheckResponse, Code};
use crate::service::{CheckError, Service};

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
/// 15-19% of its throughput on two cores; the README has the figures.)
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
