//! Every answer's status code is decided here, and nowhere else: a check's answer (200
//! or 429), a [`CheckError`] as HTTP status and gRPC code for each API, and the requests
//! the HTTP port refuses before any API sees them. A denial is not an error: it is a
//! 429 / `OVER_LIMIT` answer.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::service::CheckError;
use crate::service::request::{CheckResponse, Code};

/// `/healthcheck`'s answer when not ready, as the reference's.
pub const REFERENCE_UNHEALTHY: StatusCode = StatusCode::INTERNAL_SERVER_ERROR;

/// What the HTTP port refuses before an API sees it.
#[derive(Debug)]
pub enum Refused {
    /// A body over this many bytes: 413.
    BodyTooLarge(usize),
    /// A body that did not arrive within this time: 408.
    BodyTimeout(Duration),
    /// A body that could not be read: 400.
    BodyUnreadable(String),
    /// No route: 404.
    NoSuchEndpoint,
    /// A route, but not for this method: 405.
    MethodNotAllowed,
    /// `/readyz` while not ready, and why: 503.
    NotReady(String),
    /// Over mutual TLS, a client without a certificate asked for more than health: 403.
    ClientCertRequired,
    /// The admin listener's token is set and the request did not carry it: 401.
    Unauthorized,
    /// The admin listener was asked under a name it does not answer to (`Host`), or
    /// by a page of another site (`Origin`): 403. DNS rebinding and cross-site posts.
    HostNotAllowed(String),
    /// A browser's request from a page of another site (its `Origin`) to a check API:
    /// 403. A page could otherwise spend anyone's capacity from its visitors' browsers.
    CrossSite(String),
}

/// Waits out a request's wait (a rule's `max_wait`) before its answer goes, on `api`
/// (`grpc`, `json`, `http`): the answer is the go-ahead, and its slot is at the wait's
/// end. Counted in `spillway_wait_seconds`; `spillway_waiters` counts the answers held
/// now (a caller that goes away during its wait is no longer one). With `waiters` full
/// the answer is a refusal instead, told to retry after its wait (its reserved slot
/// lapses unused: never more than the rate), and `spillway_waits_refused_total` counts
/// it.
pub async fn wait_out(api: &'static str, r: &mut CheckResponse, waiters: &Semaphore) {
    if r.wait.is_zero() {
        return;
    }
    let Ok(_held) = waiters.try_acquire() else {
        crate::metrics::wait_refused(api);
        r.refuse_wait();
        return;
    };
    crate::metrics::waited(api, r.wait);
    let _waiting = crate::metrics::Waiting::new(api);
    tokio::time::sleep(r.wait).await;
}

/// A check's answer on `/v1/check` and `/json`: 200, or 429 over the limit.
pub fn answer_status(overall: Code) -> StatusCode {
    match overall {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
    }
}

/// A `/v1/check` error: 400 for a bad request, 503 when the store failed under
/// `closed`; the body says which.
pub fn v1_error(e: &CheckError) -> Response {
    let status = match e {
        CheckError::Invalid(_) => StatusCode::BAD_REQUEST,
        CheckError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error_body(status, e.kind(), &e.to_string())
}

/// A `/json` error, as the reference answers it: 400 for a body that is not a request
/// *and* when the service failed.
pub fn reference_error(e: &CheckError) -> Response {
    error_body(StatusCode::BAD_REQUEST, "invalid_request", &e.to_string())
}

/// A refused HTTP request, with a JSON error body.
pub fn refused(r: Refused) -> Response {
    let (status, kind, message) = match r {
        Refused::BodyTooLarge(most) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is over {most} bytes"),
        ),
        Refused::BodyTimeout(after) => (
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!("the request body did not arrive within {after:?}"),
        ),
        Refused::BodyUnreadable(e) => (
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("the request body could not be read: {e}"),
        ),
        Refused::NoSuchEndpoint => (
            StatusCode::NOT_FOUND,
            "not_found",
            "no such endpoint".to_owned(),
        ),
        Refused::MethodNotAllowed => (
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this endpoint does not take that method".to_owned(),
        ),
        Refused::NotReady(why) => (StatusCode::SERVICE_UNAVAILABLE, "not_ready", why),
        Refused::ClientCertRequired => (
            StatusCode::FORBIDDEN,
            "client_certificate_required",
            "this listener requires a client certificate for everything but health probes"
                .to_owned(),
        ),
        Refused::HostNotAllowed(what) => (
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            format!(
                "the admin listener answers to loopback names, IP addresses and admin_hosts, \
                 not {what}"
            ),
        ),
        Refused::CrossSite(origin) => (
            StatusCode::FORBIDDEN,
            "cross_site",
            format!(
                "the check APIs answer programs, not web pages of other sites (Origin: {origin})"
            ),
        ),
        Refused::Unauthorized => {
            let mut response = error_body(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the admin listener needs its token: Authorization: Bearer TOKEN (or HTTP \
                 Basic with the token as password, as a browser asks for it)",
            );
            // Both schemes offered: a browser prompts for Basic, a script sends Bearer.
            let headers = response.headers_mut();
            headers.append(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"spillway admin\""),
            );
            headers.append(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Basic realm=\"spillway admin\""),
            );
            return response;
        }
    };
    error_body(status, kind, &message)
}

impl CheckError {
    /// The gRPC status: `INVALID_ARGUMENT` for a bad request, `UNAVAILABLE` when the
    /// store failed under `on_store_error: closed` (Envoy's `failure_mode_deny` decides).
    pub fn grpc(&self) -> tonic::Status {
        match self {
            CheckError::Invalid(m) => tonic::Status::invalid_argument(m.clone()),
            CheckError::Unavailable(m) => tonic::Status::unavailable(m.clone()),
        }
    }

    /// Whether the request was at fault (counted as an invalid request).
    pub fn is_invalid(&self) -> bool {
        matches!(self, CheckError::Invalid(_))
    }

    /// A short machine-readable kind for JSON bodies.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            CheckError::Invalid(_) => "invalid_request",
            CheckError::Unavailable(_) => "store_unavailable",
        }
    }
}

/// `/v1/commit` of a reservation not open (committed already, expired, never made):
/// 404, saying which.
pub fn no_reservation(message: &str) -> Response {
    error_body(StatusCode::NOT_FOUND, "no_reservation", message)
}

/// A JSON error body: `{"error": {"kind": "...", "message": "..."}}`.
fn error_body(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = serde_json::json!({ "error": { "kind": kind, "message": message } });
    (status, axum::Json(body)).into_response()
}
