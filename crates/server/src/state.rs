//! What every endpoint shares: the service, the header settings, and whether the
//! service is ready. (`app.rs` builds it from the configuration.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::config::{Callers, Headers};
use crate::service::request::{CheckRequest, CheckResponse, Code};
use crate::service::{CheckError, Service};

/// What every endpoint shares.
#[derive(Debug)]
pub struct AppState {
    pub service: Arc<Service>,
    pub headers: Headers,
    /// What gRPC callers may ask beyond their descriptors (overrides, costs).
    pub grpc_callers: Callers,
    /// What `/v1/check` and `/json` callers may ask.
    pub http_callers: Callers,
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

    /// Decides `req` for a caller of a listener whose callers may ask what `callers`
    /// says (a request asking more is refused, or its overrides dropped); then, without
    /// holding up the answer, queues it for the candidate policies (if any) to decide in
    /// shadow.
    pub(crate) async fn check(
        &self,
        mut req: CheckRequest,
        callers: Callers,
    ) -> Result<CheckResponse, CheckError> {
        req.bound_by(callers)?;
        let answer = self.service.check(&req).await?;
        self.service.shadow(req, answer.overall == Code::Ok);
        Ok(answer)
    }

    /// Ready, or why not in words any prober may read.
    pub(crate) async fn readiness(&self) -> Result<(), String> {
        self.why_not_ready().await.map_err(|not| not.said)
    }

    /// Ready, or why not: what a prober is told, and (for the log) the store's own
    /// words, which can name nodes and keys.
    pub(crate) async fn why_not_ready(&self) -> Result<(), NotReady> {
        let said = |m: &str| NotReady {
            said: m.to_owned(),
            detail: m.to_owned(),
        };
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err(said("shutting down"));
        }
        if self.waiting_for_rules.load(Ordering::Relaxed) {
            return Err(said("waiting for the first rules over xDS"));
        }
        if self.ready_needs_a_domain && self.service.policies().domains().is_empty() {
            return Err(said("no domain loaded"));
        }
        self.service
            .stores()
            .store()
            .ping()
            .await
            .map_err(|e| NotReady {
                said: "store unreachable".to_owned(),
                detail: format!("store unreachable: {e}"),
            })
    }
}

/// Why the service is not ready.
#[derive(Debug)]
pub(crate) struct NotReady {
    /// What a prober reads.
    pub said: String,
    /// What the log says.
    pub detail: String,
}

/// What the last load did.
#[derive(Clone, Debug, Default)]
pub struct LoadStatus {
    /// Loads so far, good or bad (the first at startup included).
    pub generation: u64,
    /// The last load's errors, if it failed.
    pub error: Option<String>,
}
