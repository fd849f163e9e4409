//! What every endpoint shares: the service, the header settings, and whether the
//! service is ready.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::api::headers::HeaderOptions;
use crate::service::Service;

/// What every endpoint shares.
#[derive(Debug)]
pub struct AppState {
    pub service: Service,
    pub headers: HeaderOptions,
    pub shutting_down: AtomicBool,
    /// The last policy load; subscribe to hear of reloads.
    pub load_status: tokio::sync::watch::Sender<LoadStatus>,
    /// How long an HTTP client may take to send a request's body, all of it (the
    /// header read timeout, again).
    pub body_read_timeout: Duration,
}

impl AppState {
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
