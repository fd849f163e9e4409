//! Operations on the HTTP port: `/metrics`, `/healthz`, `/readyz`, the reference's
//! `/healthcheck`, and `/v1/config`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::respond::{self, Refused};
use crate::metrics;
use crate::state::AppState;

pub(super) async fn prometheus() -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4")],
        metrics::handle().render(),
    )
}

/// The loaded domains, and whether the last (re)load worked and why not.
pub(super) async fn config(State(state): State<Arc<AppState>>) -> Response {
    let policies = state.service.policies();
    let domains: Vec<_> = policies
        .domains()
        .iter()
        .map(|d| serde_json::json!({ "domain": d.name(), "file": d.file(), "rules": d.rule_count() }))
        .collect();
    let status = state.load_status.borrow().clone();
    Json(serde_json::json!({
        "domains": domains,
        "loads": status.generation,
        "last_load_error": status.error,
    }))
    .into_response()
}

/// Ready when a configuration is loaded, the store answers, and no shutdown has begun.
pub(super) async fn ready(State(state): State<Arc<AppState>>) -> Response {
    match state.readiness().await {
        Ok(()) => (StatusCode::OK, Json(serde_json::json!({ "ready": true }))).into_response(),
        Err(why) => respond::refused(Refused::NotReady(why)),
    }
}

/// The reference's health check: `OK` or 500.
pub(super) async fn healthcheck(State(state): State<Arc<AppState>>) -> Response {
    match state.readiness().await {
        Ok(()) => (StatusCode::OK, "OK").into_response(),
        Err(why) => (respond::REFERENCE_UNHEALTHY, why).into_response(),
    }
}
