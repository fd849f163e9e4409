//! The HTTP port's routes, and what every request passes first: its body read whole,
//! bounded in size and in time.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use http_body_util::BodyExt;

use super::respond::{self, Refused};
use super::{ops, reference, ui, v1};
use crate::metrics;
use crate::state::AppState;

/// The most bytes a request body may have.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The HTTP routes.
pub fn router(state: Arc<AppState>) -> Router {
    let routes = if state.ui {
        ui::routes()
    } else {
        Router::new()
    };
    routes
        .route("/v1/check", post(v1::check))
        .route("/v1/explain", post(v1::explain))
        .route("/json", post(reference::check))
        .route("/metrics", get(ops::prometheus))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ops::ready))
        .route("/healthcheck", get(ops::healthcheck))
        .route("/v1/config", get(ops::config))
        .route("/v1/top", get(ops::top))
        .fallback(|| async { respond::refused(Refused::NoSuchEndpoint) })
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
            respond::refused(Refused::BodyTooLarge(MAX_BODY_BYTES))
        }
        Ok(Err(e)) => respond::refused(Refused::BodyUnreadable(e.to_string())),
        Err(_) => respond::refused(Refused::BodyTimeout(timeout)),
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
