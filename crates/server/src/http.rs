//! The HTTP port: `POST /v1/check` (Spillway's JSON API), the reference's `POST /json`,
//! and operations: `/metrics`, `/healthz`, `/readyz`, and the reference's `/healthcheck`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use spillway_policy::Unit;

use crate::request::{CheckRequest, CheckResponse, Code, Descriptor, Override, Status, ceil_ms};
use crate::respond::error_body;
use crate::{AppState, CheckError, decode, json, metrics, wire};

/// The most bytes a request body may have.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The HTTP routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/check", post(check))
        .route("/json", post(reference_json))
        .route("/metrics", get(prometheus))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/healthcheck", get(healthcheck))
        .route("/v1/config", get(config))
        .fallback(|| async { error_body(StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            read_body,
        ))
        .with_state(state)
}

/// How much of an over-long body is read and thrown away before the 413 is sent: a
/// connection closed with the client's bytes still unread is reset, and the reset can
/// reach the client before the 413 does.
const DRAIN_BYTES: usize = 4 * 1024 * 1024;

/// Reads the whole body before any handler runs: at most [`MAX_BODY_BYTES`] (413), all
/// of it within the body read timeout (408). A client that sends its headers and then
/// trickles its body, or never sends it, cannot hold a connection past that. A body
/// refused here never reaches its handler, so it is counted here as the handler would
/// count it: a request to its API, and an invalid one.
async fn read_body(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let (parts, mut body) = request.into_parts();
    let timeout = state.body_read_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let refused = match tokio::time::timeout_at(deadline, read_at_most(&mut body, MAX_BODY_BYTES))
        .await
    {
        Ok(Ok(Some(bytes))) => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
        }
        Ok(Ok(None)) => {
            // Whatever the drain ends with, the answer is the same.
            let _ = tokio::time::timeout_at(deadline, read_at_most(&mut body, DRAIN_BYTES)).await;
            error_body(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                &format!("the request body is over {MAX_BODY_BYTES} bytes"),
            )
        }
        Ok(Err(e)) => error_body(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            &format!("the request body could not be read: {e}"),
        ),
        Err(_) => error_body(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            &format!("the request body did not arrive within {timeout:?}"),
        ),
    };
    let api = match parts.uri.path() {
        "/v1/check" => Some("http"),
        "/json" => Some("json"),
        _ => None,
    };
    if let Some(api) = api {
        metrics::request(api);
        metrics::invalid_request(api);
    }
    refused
}

/// The rest of `body` if it is at most `limit` bytes; `None` (having read a little past
/// `limit`) if it is longer.
async fn read_at_most(body: &mut Body, limit: usize) -> Result<Option<Bytes>, axum::Error> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if bytes.len() + data.len() > limit {
                return Ok(None);
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(Some(Bytes::from(bytes)))
}

// === POST /v1/check ===

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct V1Request {
    domain: String,
    descriptors: Vec<V1Descriptor>,
    /// Units each matched limit is charged; 0 looks without consuming.
    #[serde(default = "one")]
    cost: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct V1Descriptor {
    entries: Vec<V1Entry>,
    cost: Option<u64>,
    limit: Option<V1Override>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct V1Entry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct V1Override {
    requests_per_unit: u64,
    unit: String,
}

fn one() -> u64 {
    1
}

#[derive(Debug, Serialize)]
struct V1Response<'a> {
    allowed: bool,
    overall_code: &'static str,
    /// The first descriptor an enforcing rule denied, and that rule's name.
    denied_by: Option<DeniedBy<'a>>,
    descriptors: Vec<V1Status<'a>>,
}

#[derive(Debug, Serialize)]
struct DeniedBy<'a> {
    descriptor: usize,
    rule: &'a str,
}

#[derive(Debug, Serialize)]
struct V1Status<'a> {
    code: &'static str,
    rule: Option<V1Rule<'a>>,
    remaining: u64,
    reset_after_ms: u64,
    retry_after_ms: Option<u64>,
    shadow_denied: bool,
    degraded: bool,
}

#[derive(Debug, Serialize)]
struct V1Rule<'a> {
    name: &'a str,
    path: &'a str,
    algorithm: &'static str,
    limit: u64,
    window_ms: u64,
    unit: Option<&'static str>,
    mode: &'static str,
}

impl TryFrom<V1Request> for CheckRequest {
    type Error = CheckError;

    fn try_from(r: V1Request) -> Result<CheckRequest, CheckError> {
        let descriptors = r
            .descriptors
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                let limit = d
                    .limit
                    .map(|o| {
                        let unit = o.unit.parse::<Unit>().map_err(|e| {
                            CheckError::Invalid(format!("descriptor {i}: limit: {e}"))
                        })?;
                        Ok::<_, CheckError>(Override {
                            requests_per_unit: o.requests_per_unit,
                            unit,
                        })
                    })
                    .transpose()?;
                Ok(Descriptor {
                    entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                    hits: d.cost,
                    limit,
                })
            })
            .collect::<Result<_, CheckError>>()?;
        Ok(CheckRequest {
            domain: r.domain,
            descriptors,
            hits: r.cost,
        })
    }
}

/// The body arrives whole: [`read_body`] read it.
async fn check(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    metrics::request("http");
    let from = |e: CheckError| (e.http_status(), e.kind(), e.to_string());
    let answer = async {
        let req = decode::v1_check(&body).map_err(from)?;
        state.service.check(&req).await.map_err(from)
    };
    match answer.await {
        Ok(r) => v1_response(&state, &r),
        Err((status, kind, message)) => {
            if kind == "invalid_request" {
                metrics::invalid_request("http");
            }
            error_body(status, kind, &message)
        }
    }
}

fn v1_response(state: &AppState, r: &CheckResponse) -> Response {
    let allowed = r.overall == Code::Ok;
    let denied_by = r
        .statuses
        .iter()
        .position(|s| s.code == Code::OverLimit)
        .map(|i| DeniedBy {
            descriptor: i,
            rule: r.statuses[i]
                .rule
                .as_ref()
                .map_or("", |rule| rule.name.as_deref().unwrap_or(&rule.path)),
        });
    let body = V1Response {
        allowed,
        overall_code: code_name(r.overall),
        denied_by,
        descriptors: r.statuses.iter().map(v1_status).collect(),
    };
    let status = if allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = (status, Json(body)).into_response();
    append(response.headers_mut(), state.headers.http_headers(r));
    response
}

fn v1_status(s: &Status) -> V1Status<'_> {
    V1Status {
        code: code_name(s.code),
        rule: s.rule.as_ref().map(|r| V1Rule {
            name: r.name.as_deref().unwrap_or(&r.path),
            path: &r.path,
            algorithm: r.algorithm,
            limit: r.requests_per_unit,
            window_ms: ceil_ms(r.window),
            unit: r.unit.map(Unit::name),
            mode: if r.shadow { "shadow" } else { "enforce" },
        }),
        remaining: s.remaining,
        reset_after_ms: ceil_ms(s.reset_after),
        retry_after_ms: s.retry_after.map(ceil_ms),
        shadow_denied: s.shadow_denied,
        degraded: s.degraded,
    }
}

fn code_name(c: Code) -> &'static str {
    match c {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

fn append<N: AsRef<str>>(headers: &mut HeaderMap, add: Vec<(N, String)>) {
    for (name, value) in add {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_ref()),
            HeaderValue::try_from(value),
        ) {
            headers.append(name, value);
        }
    }
}

// === POST /json (the reference's) ===

/// As the reference answers: 200 OK, 429 over the limit, 400 for a body that is not a
/// request *or* when the service failed (the reference's mapping; `/v1/check` says 503).
async fn reference_json(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    metrics::request("json");
    let answer = async {
        let req =
            decode::reference_json(&body).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        let r = state
            .service
            .check(&req)
            .await
            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
        Ok::<_, (StatusCode, String)>(wire::response(&r, &state.headers))
    };
    match answer.await {
        Ok(pb) => {
            let status = if pb.overall_code == 2 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, Json(json::encode(&pb))).into_response()
        }
        Err((status, message)) => {
            metrics::invalid_request("json");
            error_body(status, "invalid_request", &message)
        }
    }
}

// === operations ===

async fn prometheus() -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4")],
        metrics::handle().render(),
    )
}

/// The loaded domains, and whether the last (re)load worked and why not.
async fn config(State(state): State<Arc<AppState>>) -> Response {
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
async fn ready(State(state): State<Arc<AppState>>) -> Response {
    match state.readiness().await {
        Ok(()) => (StatusCode::OK, Json(serde_json::json!({ "ready": true }))).into_response(),
        Err(why) => error_body(StatusCode::SERVICE_UNAVAILABLE, "not_ready", &why),
    }
}

/// The reference's health check: `OK` or 500.
async fn healthcheck(State(state): State<Arc<AppState>>) -> Response {
    match state.readiness().await {
        Ok(()) => (StatusCode::OK, "OK").into_response(),
        Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, why).into_response(),
    }
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
