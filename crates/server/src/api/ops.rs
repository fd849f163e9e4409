//! Operations: `/metrics`, `/healthz`, `/readyz` and the reference's `/healthcheck` on
//! both HTTP listeners; `/v1/config`, `/v1/top` and the reference's `/rlconfig` on the
//! admin listener.

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

/// `/metrics` on the service's listeners: the holds in use counted first (the
/// Prometheus listener's own is counted each second, by the server's upkeep).
pub(super) async fn counted_prometheus(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    state.service.count_holds();
    prometheus().await
}

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
    let per_second = state.service.per_second().is_some();
    let mut domains = domain_list(&policies);
    // Which store each rule decides on, when there are two.
    if per_second {
        for rule in domains
            .iter_mut()
            .filter_map(|d| d["rules"].as_array_mut())
            .flatten()
        {
            let second = rule["window_ms"].as_u64() == Some(1000);
            rule["store"] = (if second { "per_second" } else { "main" }).into();
        }
    }
    // Each domain's overrides (`/v1/limits/{domain}` lists them).
    let overrides = state.service.overrides();
    for d in &mut domains {
        let n = d["domain"]
            .as_str()
            .and_then(|name| overrides.get(name))
            .map_or(0, |o| o.len());
        d["overrides"] = n.into();
    }
    let stores: Vec<_> = state
        .service
        .every_store()
        .map(|(name, stores)| serde_json::json!({ "name": name, "kind": stores.store().kind() }))
        .collect();
    Json(serde_json::json!({
        "domains": domains,
        "stores": stores,
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

/// `GET /v1/history`: per rule, decisions and over-limit decisions per second over the
/// last minutes, and the candidate's disagreements per domain (the console's charts).
pub(super) async fn history(State(state): State<Arc<AppState>>) -> Response {
    let metrics = metrics::handle().render();
    Json(state.history.series(&metrics, state.service.now())).into_response()
}

/// `GET /rlconfig`: the loaded rules in the reference's text format (what its debug
/// port answers and `egctl x config envoy-ratelimit` reads), one line per limit, sorted:
/// `domain.key_value.key: unit=MINUTE requests_per_unit=10, shadow_mode: false`. A
/// window that is not one unit is written as a duration (`unit=10s`); an unlimited or
/// block-all rule has `unit=UNKNOWN requests_per_unit=0`, as the reference's unlimited.
pub(super) async fn rlconfig(State(state): State<Arc<AppState>>) -> Response {
    let policies = state.service.policies();
    let mut lines: Vec<(String, String)> = policies
        .domains()
        .iter()
        .flat_map(|d| {
            d.rules().into_iter().map(move |rule| {
                let r = rule.summary();
                let unit = match (r.window_ms, r.limit) {
                    (Some(ms), Some(_)) => reference_unit(ms),
                    _ => "UNKNOWN".to_owned(),
                };
                let key = format!("{}.{}{}", d.name(), r.path, r.slot);
                let line = format!(
                    ": unit={unit} requests_per_unit={}, shadow_mode: {}\n",
                    r.limit.unwrap_or(0),
                    r.mode == "shadow"
                );
                (key, line)
            })
        })
        .collect();
    lines.sort();
    let text: String = lines.into_iter().map(|(k, l)| k + &l).collect();
    ([("content-type", "text/plain; charset=utf-8")], text).into_response()
}

/// The reference's unit for a window of `ms`, or the window itself.
fn reference_unit(ms: u64) -> String {
    match ms {
        1_000 => "SECOND".into(),
        60_000 => "MINUTE".into(),
        3_600_000 => "HOUR".into(),
        86_400_000 => "DAY".into(),
        604_800_000 => "WEEK".into(),
        _ => spillway_policy::duration::format(std::time::Duration::from_millis(ms)),
    }
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

/// Ready when a configuration is loaded, the store answers a PING within the store
/// timeout, and no shutdown has begun (Spillway's own check; `/healthcheck` is the
/// reference's, which a store outage does not fail).
pub(super) async fn ready(State(state): State<Arc<AppState>>) -> Response {
    match state.readiness().await {
        Ok(()) => (StatusCode::OK, Json(serde_json::json!({ "ready": true }))).into_response(),
        Err(why) => respond::refused(Refused::NotReady(why)),
    }
}

/// The reference's health check: `OK` or 500, following the process (and the store's
/// connection only when `health_follows_store`), never a store call of its own.
pub(super) async fn healthcheck(State(state): State<Arc<AppState>>) -> Response {
    match state.health() {
        Ok(()) => (StatusCode::OK, "OK").into_response(),
        Err(why) => (respond::REFERENCE_UNHEALTHY, why).into_response(),
    }
}
