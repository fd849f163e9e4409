//! What every endpoint shares: the service, the header settings, and whether the
//! service is ready.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::sync::Arc;

use crate::api::headers::HeaderOptions;
use crate::service::request::{CheckRequest, CheckResponse, Code};
use crate::service::{CheckError, Service};

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
}

impl AppState {
    /// Decides `req` for an API; then, without holding up the answer, the candidate
    /// policies (if any) decide it in shadow on a task of their own.
    pub(crate) async fn check(
        self: &Arc<Self>,
        req: CheckRequest,
    ) -> Result<CheckResponse, CheckError> {
        let answer = self.service.check(&req).await?;
        if let Some(permit) = self.service.candidate_permit() {
            let state = Arc::clone(self);
            let live_allowed = answer.overall == Code::Ok;
            tokio::spawn(async move {
                state.service.candidate_check(&req, live_allowed).await;
                drop(permit);
            });
        }
        Ok(answer)
    }

    pub(crate) async fn readiness(&self) -> Result<(), String> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err("shutting down".into());
        }
        self.service
            .stores()
            .store()
            .ping()
            .await
            .map_err(|e| format!("store unreachable: {e}"))
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
