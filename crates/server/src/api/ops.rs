//! Operations on the HTTP port: `/metrics`, `/healthz`, `/readyz`, the reference's
//! `/healthcheck`, `/v1/config` and `/v1/top`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::respond::{self, Refused};
use crate::metrics;
use crate::service::CheckError;
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
    let status = state.load_status.borrow().clone();
    let candidate = state.service.candidate_policies().map(|set| {
        let status = state.candidate_status.borrow().clone();
        serde_json::json!({
            "domains": domain_list(&set),
            "loads": status.generation,
            "last_load_error": status.error,
        })
    });
    Json(serde_json::json!({
        "domains": domain_list(&policies),
        "loads": status.generation,
        "last_load_error": status.error,
        "candidate": candidate,
    }))
    .into_response()
}

/// `GET /v1/top?domain=D`: per rule, the keys denied most over the last minutes.
pub(super) async fn top(
    State(state): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(domain) = query.get("domain").filter(|d| !d.is_empty()) else {
        return respond::v1_error(&CheckError::Invalid(
            "give the domain: /v1/top?domain=NAME".into(),
        ));
    };
    Json(serde_json::json!({
        "domain": domain,
        "minutes": crate::top::MINUTES,
        "rules": state.service.top(domain),
    }))
    .into_response()
}

/// Each domain of `set`: its name, file and rules.
fn domain_list(set: &spillway_policy::PolicySet) -> Vec<serde_json::Value> {
    set.domains()
        .iter()
        .map(|d| {
            let rules: Vec<_> = d.rules().into_iter().map(|r| r.summary()).collect();
            serde_json::json!({ "domain": d.name(), "file": d.file(), "rules": rules })
        })
        .collect()
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
