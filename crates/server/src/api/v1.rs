//! Spillway's own HTTP API, `POST /v1/check`: a JSON body naming a domain and its
//! descriptors (with costs and overrides), answered with every descriptor's status, 200
//! or 429, and the rate limit headers.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spillway_policy::Unit;

use super::respond;
use crate::service::CheckError;
use crate::service::request::{
    CheckRequest, CheckResponse, Code, Descriptor, Override, Status, ceil_ms,
};
use crate::service::reserve::{self, CommitError};
use crate::state::AppState;
use crate::{metrics, otel};
use tracing::Instrument;

/// A `POST /v1/check` body, decoded (not yet checked against the service's bounds).
pub fn decode(body: &[u8]) -> Result<CheckRequest, CheckError> {
    decode_check(body).map(|(req, _)| req)
}

/// A `POST /v1/check` body, and whether the server is to wait out a wait the request
/// is admitted after (`"wait": true`) rather than say it.
fn decode_check(body: &[u8]) -> Result<(CheckRequest, bool), CheckError> {
    let v1: V1Request = parse(body)?;
    if v1.ttl_ms.is_some() {
        return Err(CheckError::Invalid(
            "ttl_ms is a reservation's (POST /v1/reserve)".into(),
        ));
    }
    let wait = v1.wait;
    Ok((CheckRequest::try_from(v1)?, wait))
}

/// A `POST /v1/reserve` body: `/v1/check`'s, with the reservation's `ttl_ms`.
fn decode_reserve(body: &[u8]) -> Result<(CheckRequest, Duration), CheckError> {
    let v1: V1Request = parse(body)?;
    if v1.wait {
        return Err(CheckError::Invalid(
            "wait is /v1/check's: a reservation says its wait (wait_ms)".into(),
        ));
    }
    let ttl = v1
        .ttl_ms
        .map_or(reserve::DEFAULT_TTL, Duration::from_millis);
    Ok((CheckRequest::try_from(v1)?, ttl))
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, CheckError> {
    serde_json::from_slice(body)
        .map_err(|e| CheckError::Invalid(format!("invalid request body: {e}")))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct V1Request {
    domain: String,
    descriptors: Vec<V1Descriptor>,
    /// Units each matched limit is charged; 0 looks without consuming.
    #[serde(default = "one")]
    cost: u64,
    /// The costs are usage reported after the fact: charged in full, into debt.
    #[serde(default)]
    usage: bool,
    /// `/v1/reserve` only: how long the reservation waits for its commit (a number:
    /// `null` is refused, as the schema says).
    #[serde(default, deserialize_with = "some_number")]
    ttl_ms: Option<u64>,
    /// `/v1/check` only: admitted after a wait (a rule's `max_wait`), the server waits
    /// it out before answering; otherwise the answer says it (`wait_ms`) and the caller
    /// waits.
    #[serde(default)]
    wait: bool,
}

/// A `POST /v1/commit` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct V1Commit {
    reservation: String,
    /// What the work really cost; 0 releases the reservation.
    used: u64,
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

fn some_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    u64::deserialize(d)
        .map(Some)
        .map_err(|e| D::Error::custom(format!("ttl_ms: {e}")))
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
    /// Admitted after a wait: how long to wait before going ahead (ms, rounded up; 0:
    /// none). The slot is reserved at its end.
    wait_ms: u64,
    /// The server waited it out before answering (`"wait": true`).
    waited: bool,
    /// `/v1/reserve`, when admitted: the reservation to commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation: Option<V1Reservation>,
    /// `/v1/commit`: what was settled.
    #[serde(skip_serializing_if = "Option::is_none")]
    settled: Option<V1Settled>,
}

#[derive(Debug, Serialize)]
struct V1Reservation {
    id: String,
    ttl_ms: u64,
}

#[derive(Debug, Serialize)]
struct V1Settled {
    estimate: u64,
    used: u64,
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
    wait_ms: u64,
}

#[derive(Debug, Serialize)]
struct V1Rule<'a> {
    name: &'a str,
    path: &'a str,
    algorithm: &'static str,
    limit: u64,
    /// The most `remaining` can be: the burst of `token_bucket` and `gcra`, else `limit`.
    capacity: u64,
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
            usage: r.usage,
            ..CheckRequest::default()
        })
    }
}

/// The body arrives whole: the router's `read_body` read it.
pub(super) async fn check(
    State(state): State<Arc<AppState>>,
    parent: otel::Parent,
    body: Bytes,
) -> Response {
    metrics::request("http");
    let span = otel::decision_span("/v1/check", || parent.headers());
    let answer = async {
        let (req, wait) = decode_check(&body)?;
        let queue = wait.then_some("http");
        Ok::<_, CheckError>((state.check(req, state.http_callers, queue).await?, wait))
    };
    match answer.instrument(span.clone()).await {
        Ok((mut r, wait)) => {
            otel::outcome(&span, Ok(r.overall == Code::Ok));
            if wait {
                respond::wait_out("http", &mut r, &state.waiters).await;
            } else if !r.wait.is_zero() {
                metrics::waited("http", r.wait);
            }
            respond_v1(&state, &r, None, None, wait)
        }
        Err(e) => {
            otel::outcome(&span, Err(e.kind()));
            if e.is_invalid() {
                metrics::invalid_request("http");
            }
            respond::v1_error(&e)
        }
    }
}

/// `POST /v1/release`: `/v1/check`'s body; each descriptor gives back the hold it
/// names (its concurrency rules', by its last value) and nothing is counted. Answered
/// as `/v1/check` is, each status a look after the release.
pub(super) async fn release(state: State<Arc<AppState>>, body: Bytes) -> Response {
    on_holds(state, body, "release", |req| CheckRequest {
        release: true,
        ..req
    })
    .await
}

/// `POST /v1/renew`: `/v1/check`'s body; each descriptor renews the hold it names
/// (its concurrency rules', by its last value: the lease starts again) and nothing
/// else is counted. A take never renews (a take of a held id is one more hold): a
/// long call renews before its lease ends. Answered as `/v1/check` is: 429 when a
/// hold had lapsed and its slots were taken meanwhile.
pub(super) async fn renew(state: State<Arc<AppState>>, body: Bytes) -> Response {
    on_holds(state, body, "renew", |req| CheckRequest {
        renew: true,
        ..req
    })
    .await
}

/// `/v1/release` and `/v1/renew`: `/v1/check`'s body made into `what` by `make`.
async fn on_holds(
    State(state): State<Arc<AppState>>,
    body: Bytes,
    what: &'static str,
    make: impl FnOnce(CheckRequest) -> CheckRequest,
) -> Response {
    metrics::request(what);
    let answer = async {
        let req = make(decode(&body)?);
        state.check(req, state.http_callers, None).await
    };
    match answer.await {
        Ok(r) => respond_v1(&state, &r, None, None, false),
        Err(e) => invalid(e, what),
    }
}

/// `POST /v1/reserve`: `/v1/check`'s body (the cost is the estimate) and `ttl_ms`;
/// answered as `/v1/check` is, with the reservation's id when admitted.
pub(super) async fn reserve(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    metrics::request("reserve");
    let answer = async {
        let (req, ttl) = decode_reserve(&body)?;
        let req = req.admit(state.http_callers)?;
        state.service.reserve(&req, ttl).await
    };
    match answer.await {
        Ok((r, reserved)) => {
            let reservation = reserved.map(|r| V1Reservation {
                id: r.id,
                ttl_ms: r.ttl.as_millis() as u64,
            });
            respond_v1(&state, &r, reservation, None, false)
        }
        Err(e) => invalid(e, "reserve"),
    }
}

/// `POST /v1/commit`: settles a reservation with what the work `used`; 200 with the
/// check after it (`allowed: false` while a limit is in debt), 404 for a reservation
/// committed already or expired.
pub(super) async fn commit(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    metrics::request("commit");
    let answer = async {
        let c: V1Commit = parse(&body).map_err(CommitError::Check)?;
        state.service.commit(&c.reservation, c.used).await
    };
    match answer.await {
        Ok(c) => {
            let settled = V1Settled {
                estimate: c.estimate,
                used: c.used,
            };
            respond_v1(&state, &c.answer, None, Some(settled), false)
        }
        Err(CommitError::Check(e)) => invalid(e, "commit"),
        Err(e @ CommitError::Unknown(_)) => respond::no_reservation(&e.to_string()),
    }
}

fn invalid(e: CheckError, api: &'static str) -> Response {
    if e.is_invalid() {
        metrics::invalid_request(api);
    }
    respond::v1_error(&e)
}

/// `POST /v1/explain`: `/v1/check`'s body, answered with what a check would do and
/// why, consuming nothing (200 whatever the verdict; 400 for a bad body).
pub(super) async fn explain(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    metrics::request("explain");
    let answer = async {
        let req = decode(&body)?.validate()?;
        state.service.explain(&req).await
    };
    match answer.await {
        Ok(explanation) => Json(explanation).into_response(),
        Err(e) => {
            if e.is_invalid() {
                metrics::invalid_request("explain");
            }
            respond::v1_error(&e)
        }
    }
}

/// A check's answer as `/v1/check` gives it (200 or 429, headers); a commit's is 200
/// whatever the limits say: the commit landed. `waited`: the server waited out the
/// request's wait before answering.
fn respond_v1(
    state: &AppState,
    r: &CheckResponse,
    reservation: Option<V1Reservation>,
    settled: Option<V1Settled>,
    waited: bool,
) -> Response {
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
        wait_ms: ceil_ms(r.wait),
        waited: waited && !r.wait.is_zero(),
        reservation,
        settled: None,
    };
    let status = match settled {
        Some(_) => axum::http::StatusCode::OK,
        None => respond::answer_status(r.overall),
    };
    let body = V1Response { settled, ..body };
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
            capacity: r.capacity,
            window_ms: ceil_ms(r.window),
            unit: r.unit.map(Unit::name),
            mode: if r.shadow { "shadow" } else { "enforce" },
        }),
        remaining: s.remaining,
        reset_after_ms: ceil_ms(s.reset_after),
        retry_after_ms: s.retry_after.map(ceil_ms),
        shadow_denied: s.shadow_denied,
        degraded: s.degraded,
        wait_ms: ceil_ms(s.wait),
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
