//! `GET /ui`: the console page. One HTML page, a stylesheet and a script, compiled into
//! the binary (no CDN: it works offline and behind a firewall). The script reads what
//! any client can: `/v1/config` for the rules, `/metrics` for the decision counters,
//! `/v1/history` for the same counters over the last minutes (the charts, drawn as
//! inline SVG), `/v1/top` for the denied keys, and posts the explain form to
//! `/v1/explain`.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

const PAGE: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/console.js");
const STYLE: &str = include_str!("ui/console.css");

/// Only the page's own files run or load; nothing else is fetched, framed or posted.
/// Keys shown on the page are chosen by clients: the script writes them as text, and
/// this policy would refuse an inline script if one ever slipped through.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// The console's routes (added unless `--no-ui`).
pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/ui",
            get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/ui/",
            get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/ui/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/ui/console.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
