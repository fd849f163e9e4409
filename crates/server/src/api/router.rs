//! The HTTP listeners' routes, and what every request passes first: over mutual TLS,
//! a client certificate for anything but health; on the admin listener, its token;
//! then its body read whole, bounded in size and in time.
//!
//! The check port serves what a caller of the check APIs needs: `/v1/check`, `/json`,
//! health and `/metrics` (rule names and counts, never keys). The admin listener
//! serves what shows who is limited and how: `/ui`, `/v1/top`, `/v1/config`,
//! `/v1/explain`, the reference's `/rlconfig`, `/openapi.json`, and health and `/metrics`
//! again.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use base64::Engine;
use http_body_util::BodyExt;
use subtle::ConstantTimeEq;

use super::respond::{self, Refused};
use super::{limits, openapi, ops, reference, ui, v1};
use crate::metrics;
use crate::state::AppState;
use crate::tls::{ClientCert, is_health};

/// The most bytes a request body may have.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The check port's HTTP routes.
pub fn router(state: Arc<AppState>) -> Router {
    with_health(Router::new())
        .route("/v1/check", post(v1::check))
        .route("/v1/acquire", post(v1::check))
        .route("/v1/release", post(v1::release))
        .route("/v1/renew", post(v1::renew))
        .route("/v1/reserve", post(v1::reserve))
        .route("/v1/commit", post(v1::commit))
        .route("/json", post(reference::check))
        .fallback(|| async { respond::refused(Refused::NoSuchEndpoint) })
        .method_not_allowed_fallback(|| async { respond::refused(Refused::MethodNotAllowed) })
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            read_body,
        ))
        .layer(middleware::from_fn(same_site))
        .layer(middleware::from_fn(client_cert))
        .with_state(state)
}

/// The admin listener's routes; with a `token`, every one but health needs it. Every
/// one but health answers only to the names in `hosts` (see [`allowed_host`]).
pub fn admin_router(state: Arc<AppState>, token: Option<Arc<str>>, hosts: Arc<[String]>) -> Router {
    let routes = if state.ui {
        ui::routes()
    } else {
        Router::new()
    };
    with_health(routes)
        .route("/v1/explain", post(v1::explain))
        .route("/v1/rlqs/explain", post(super::rlqs::explain))
        .route("/v1/config", get(ops::config))
        .route("/v1/top", get(ops::top))
        .route("/v1/history", get(ops::history))
        .route(
            "/v1/limits/{domain}",
            get(limits::get).put(limits::put).delete(limits::delete),
        )
        .route("/v1/limits/{domain}/history", get(limits::history))
        .route("/v1/limits/{domain}/import", post(limits::import))
        .route("/rlconfig", get(ops::rlconfig))
        .route("/openapi.json", get(openapi::serve))
        .fallback(|| async { respond::refused(Refused::NoSuchEndpoint) })
        .method_not_allowed_fallback(|| async { respond::refused(Refused::MethodNotAllowed) })
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            read_admin_body,
        ))
        .layer(middleware::from_fn_with_state(token, admin_token))
        .layer(middleware::from_fn_with_state(hosts, admin_host))
        .layer(middleware::from_fn(client_cert))
        .with_state(state)
}

/// The check port's routes over `state`, for tests that drive them in process.
pub fn http_app(state: Arc<AppState>) -> Router {
    router(state)
}

/// The admin listener's routes over `state` without a token, for tests that drive
/// them in process.
pub fn admin_app(state: Arc<AppState>) -> Router {
    admin_router(state, None, Arc::from([]))
}

/// The Prometheus listener (`metrics_addr`): its one path, and health.
pub fn metrics_router(path: &str) -> Router {
    Router::new()
        .route(path, get(ops::prometheus))
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(|| async { respond::refused(Refused::NoSuchEndpoint) })
        .method_not_allowed_fallback(|| async { respond::refused(Refused::MethodNotAllowed) })
}

/// Health and metrics, on both listeners.
fn with_health(routes: Router<Arc<AppState>>) -> Router<Arc<AppState>> {
    routes
        .route("/metrics", get(ops::counted_prometheus))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ops::ready))
        .route("/healthcheck", get(ops::healthcheck))
}

/// Over mutual TLS, a client that presented no certificate reaches health only.
async fn client_cert(request: Request, next: Next) -> Response {
    let presented = request
        .extensions()
        .get::<ClientCert>()
        .is_none_or(|c| c.presented);
    if presented || is_health(request.uri().path()) {
        next.run(request).await
    } else {
        respond::refused(Refused::ClientCertRequired)
    }
}

/// The admin token, as `Authorization: Bearer TOKEN` or as HTTP Basic's password (any
/// user name), compared in constant time; health needs none.
async fn admin_token(
    State(token): State<Option<Arc<str>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        request.extensions_mut().insert(limits::Caller("anonymous"));
        return next.run(request).await;
    };
    if is_health(request.uri().path()) {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(presented_token);
    match given {
        Some(given) if bool::from(given.as_bytes().ct_eq(token.as_bytes())) => {
            request.extensions_mut().insert(limits::Caller("token"));
            next.run(request).await
        }
        _ => respond::refused(Refused::Unauthorized),
    }
}

/// The admin listener answers only under a name it knows: a page on another site that
/// points its own name at 127.0.0.1 (DNS rebinding) sends that name as `Host`, and a
/// page that posts to the listener from another site sends its own as `Origin`; both
/// are refused, health aside (probes).
async fn admin_host(State(hosts): State<Arc<[String]>>, request: Request, next: Next) -> Response {
    if is_health(request.uri().path()) {
        return next.run(request).await;
    }
    let headers = request.headers();
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    let origin = headers
        .get(axum::http::header::ORIGIN)
        .and_then(|v| v.to_str().ok());
    if let Some(host) = host.filter(|h| !allowed_host(authority_host(h), &hosts)) {
        return respond::refused(Refused::HostNotAllowed(format!("Host: {host}")));
    }
    if let Some(origin) = origin {
        let name = origin.split_once("://").map_or("", |(_, rest)| rest);
        if origin != "null" && !allowed_host(authority_host(name), &hosts) {
            return respond::refused(Refused::HostNotAllowed(format!("Origin: {origin}")));
        }
    }
    next.run(request).await
}

/// The check APIs answer programs (Envoy, applications, curl: none sends `Origin`) and
/// pages of their own origin; a browser's request from a page of another site — a
/// "simple" `text/plain` POST needs no preflight — is refused before its body is read.
async fn same_site(request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Some(origin) = headers.get(axum::http::header::ORIGIN)
        && !is_health(request.uri().path())
    {
        let origin = origin.to_str().unwrap_or("(not text)");
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()))
            .map(authority_host);
        let from = origin
            .split_once("://")
            .map(|(_, rest)| authority_host(rest));
        if origin == "null" || from.is_none() || from != host {
            return respond::refused(Refused::CrossSite(origin.to_owned()));
        }
    }
    next.run(request).await
}

/// The host of `host[:port]` (`[v6]:port` included), lowercase.
fn authority_host(authority: &str) -> String {
    let authority = authority.trim().trim_end_matches('/');
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                authority
            }
        }),
    };
    host.to_ascii_lowercase()
}

/// Whether the admin listener answers to `host`: an IP address (nothing rebinds to a
/// literal address), `localhost` and its subdomains, or a name in `hosts`.
pub fn allowed_host(host: String, hosts: &[String]) -> bool {
    host.parse::<std::net::IpAddr>().is_ok()
        || host == "localhost"
        || host.ends_with(".localhost")
        || hosts.iter().any(|h| h.eq_ignore_ascii_case(&host))
}

/// The token in an `Authorization` header: Bearer's, or Basic's password.
fn presented_token(header: &str) -> Option<String> {
    let (scheme, rest) = header.split_once(' ')?;
    if scheme.eq_ignore_ascii_case("bearer") {
        Some(rest.trim().to_owned())
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        text.split_once(':')
            .map(|(_, password)| password.to_owned())
    } else {
        None
    }
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
    read_at_most_into(&state, request, next, MAX_BODY_BYTES).await
}

/// [`read_body`] on the admin listener, where a bulk import of overrides is a file of
/// up to [`crate::limits::IMPORT_MAX_BYTES`], not a request.
async fn read_admin_body(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let max = if path.starts_with("/v1/limits/") && path.ends_with("/import") {
        crate::limits::IMPORT_MAX_BYTES
    } else {
        MAX_BODY_BYTES
    };
    read_at_most_into(&state, request, next, max).await
}

/// The body of `request`, at most `max` bytes within the body read timeout, handed
/// to `next`; else the refusal.
async fn read_at_most_into(state: &AppState, request: Request, next: Next, max: usize) -> Response {
    let (parts, mut body) = request.into_parts();
    let timeout = state.body_read_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let refused = match tokio::time::timeout_at(deadline, read_at_most(&mut body, max)).await {
        Ok(Ok(Some(bytes))) => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
        }
        Ok(Ok(None)) => {
            // Whatever the drain ends with, the answer is the same.
            let _ = tokio::time::timeout_at(deadline, read_at_most(&mut body, DRAIN_BYTES)).await;
            respond::refused(Refused::BodyTooLarge(max))
        }
        Ok(Err(e)) => respond::refused(Refused::BodyUnreadable(e.to_string())),
        Err(_) => respond::refused(Refused::BodyTimeout(timeout)),
    };
    let api = match parts.uri.path() {
        "/v1/check" | "/v1/acquire" => Some("http"),
        "/v1/release" => Some("release"),
        "/v1/renew" => Some("renew"),
        "/v1/reserve" => Some("reserve"),
        "/v1/commit" => Some("commit"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_listener_answers_to_addresses_loopback_names_and_its_own() {
        let hosts = ["spillway.internal".to_owned()];
        let ok = |h: &str| allowed_host(authority_host(h), &hosts);
        for good in [
            "127.0.0.1:6070",
            "[::1]:6070",
            "10.0.0.5",
            "localhost:6070",
            "LOCALHOST",
            "ui.localhost:6070",
            "spillway.internal:6070",
            "Spillway.Internal",
        ] {
            assert!(ok(good), "{good}");
        }
        for bad in [
            "rebind.attacker.example:6070",
            "attacker.example",
            "localhost.attacker.example",
            "spillway.internal.attacker.example",
            "127.0.0.1.nip.io:6070",
        ] {
            assert!(!ok(bad), "{bad}");
        }
    }

    #[test]
    fn the_token_comes_as_bearer_or_as_basic_password() {
        assert_eq!(presented_token("Bearer s3cret").as_deref(), Some("s3cret"));
        assert_eq!(
            presented_token("bearer  s3cret ").as_deref(),
            Some("s3cret")
        );
        // "ops:s3cret"
        assert_eq!(
            presented_token("Basic b3BzOnMzY3JldA==").as_deref(),
            Some("s3cret")
        );
        assert_eq!(presented_token("Basic !!!"), None);
        assert_eq!(presented_token("Digest x"), None);
        assert_eq!(presented_token("s3cret"), None);
    }
}
