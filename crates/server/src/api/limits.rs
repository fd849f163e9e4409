//! `/v1/limits/{domain}` on the admin listener: overrides, limits set as data for one
//! exact descriptor path (`limits.rs`). `PUT` sets one, `GET` reads one (`?entry=`)
//! or a page (`?prefix=&after=&limit=`), `DELETE` removes one, and
//! `/v1/limits/{domain}/history?entry=` shows a path's last changes. A path is named
//! by `entry=key=value` parameters in order (the key before the first `=`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::respond;
use crate::limits::{Entry, LimitsError};
use crate::state::AppState;
use crate::tls::ClientCert;

/// Who an admin request comes from, as the admin token middleware found it: the
/// token's name (`token`), or none set (`anonymous`). A client certificate's subject
/// comes first when there is one.
#[derive(Clone, Debug)]
pub(crate) struct Caller(pub(crate) &'static str);

/// `PUT /v1/limits/{domain}`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBody {
    entries: Vec<Entry>,
    limits: serde_json::Value,
}

/// Who made a change: the client certificate's subject (`cert:CN=ops`), else how the
/// admin token middleware let the request in. Never anything the request says of
/// itself.
fn author(request: &Request) -> String {
    let ext = request.extensions();
    if let Some(subject) = ext.get::<ClientCert>().and_then(|c| c.subject.clone()) {
        return format!("cert:{subject}");
    }
    ext.get::<Caller>().map_or("anonymous", |c| c.0).to_owned()
}

/// The parameters of a query, in order.
fn params(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The path the `entry=key=value` parameters name, in order.
fn path_of(params: &[(String, String)]) -> Result<Vec<(String, String)>, LimitsError> {
    let path: Vec<(String, String)> = params
        .iter()
        .filter(|(k, _)| k == "entry")
        .map(|(_, v)| {
            let (key, value) = v.split_once('=').unwrap_or((v, ""));
            (key.to_owned(), value.to_owned())
        })
        .collect();
    if path.is_empty() {
        return Err(LimitsError::Invalid(vec![
            spillway_policy::overrides::OverrideError {
                field: "entry".into(),
                message: "name the path: ?entry=key=value (one per entry, in order)".into(),
            },
        ]));
    }
    Ok(path)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A refusal as JSON: 400 with every field at fault, 404, or 503.
pub(super) fn error(e: &LimitsError) -> Response {
    let (status, kind) = match e {
        LimitsError::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_override"),
        LimitsError::UnknownDomain(_) => (StatusCode::NOT_FOUND, "unknown_domain"),
        LimitsError::NotFound => (StatusCode::NOT_FOUND, "no_override"),
        LimitsError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
    };
    let mut body = serde_json::json!({ "error": { "kind": kind, "message": e.to_string() } });
    if let LimitsError::Invalid(fields) = e {
        body["error"]["fields"] = fields
            .iter()
            .map(|f| serde_json::json!({ "field": f.field, "message": f.message }))
            .collect();
    }
    (status, Json(body)).into_response()
}

/// `PUT /v1/limits/{domain}`: sets the override of the body's `entries` to its
/// `limits`. 200 with the change (`before` is the override it replaced, or null).
pub(super) async fn put(
    State(state): State<Arc<AppState>>,
    Path(domain): Path<String>,
    request: Request,
) -> Response {
    let by = author(&request);
    let body = match axum::body::to_bytes(request.into_body(), super::router::MAX_BODY_BYTES).await
    {
        Ok(b) => b,
        Err(e) => return respond::refused(respond::Refused::BodyUnreadable(e.to_string())),
    };
    let body: PutBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(&LimitsError::Invalid(vec![
                spillway_policy::overrides::OverrideError {
                    field: "body".into(),
                    message: format!(
                        "{e} (expected {{\"entries\": [{{\"key\": …, \"value\": …}}], \"limits\": [ … ]}})"
                    ),
                },
            ]));
        }
    };
    match state
        .limits
        .put(&domain, body.entries, body.limits, &by)
        .await
    {
        Ok(change) => Json(change).into_response(),
        Err(e) => error(&e),
    }
}

/// `POST /v1/limits/{domain}/import`: a bulk file (NDJSON, one `PUT` body a line, at
/// most [`crate::limits::IMPORT_MAX_BYTES`] and [`spillway_policy::overrides::BULK_MAX_LINES`]
/// lines), checked whole, then set. 200 with how many; 400 naming each line at fault,
/// nothing set.
pub(super) async fn import(
    State(state): State<Arc<AppState>>,
    Path(domain): Path<String>,
    request: Request,
) -> Response {
    let by = author(&request);
    let body =
        match axum::body::to_bytes(request.into_body(), crate::limits::IMPORT_MAX_BYTES).await {
            Ok(b) => b,
            Err(e) => return respond::refused(respond::Refused::BodyUnreadable(e.to_string())),
        };
    let Ok(text) = std::str::from_utf8(&body) else {
        return error(&LimitsError::Invalid(vec![
            spillway_policy::overrides::OverrideError {
                field: "body".into(),
                message: "not UTF-8: one JSON override a line".into(),
            },
        ]));
    };
    match state.limits.import(&domain, text, &by).await {
        Ok(n) => Json(serde_json::json!({ "domain": domain, "imported": n })).into_response(),
        Err(e) => error(&e),
    }
}

/// `GET /v1/limits/{domain}`: with `entry=` parameters, that path's override (404
/// without one); without, a page of the domain's overrides in the order of their
/// paths' text, those starting with `prefix`, after `after`, `limit` of them (100; at
/// most 1000), with `next` for the following page.
pub(super) async fn get(
    State(state): State<Arc<AppState>>,
    Path(domain): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let params = params(query.as_deref());
    if params.iter().any(|(k, _)| k == "entry") {
        let path = match path_of(&params) {
            Ok(p) => p,
            Err(e) => return error(&e),
        };
        return match state.limits.get(&domain, &path) {
            Some(r) => Json(r).into_response(),
            None => error(&LimitsError::NotFound),
        };
    }
    let limit = match count(&params, 100, 1, crate::limits::PAGE_MAX) {
        Ok(n) => n,
        Err(e) => return error(&e),
    };
    let prefix = param(&params, "prefix").unwrap_or("");
    Json(
        state
            .limits
            .page(&domain, prefix, param(&params, "after"), limit),
    )
    .into_response()
}

/// `DELETE /v1/limits/{domain}?entry=…`: removes that path's override (the file's rules
/// apply again). 200 with the change, 404 without one.
pub(super) async fn delete(
    State(state): State<Arc<AppState>>,
    Path(domain): Path<String>,
    request: Request,
) -> Response {
    let by = author(&request);
    let params = params(request.uri().query());
    let path = match path_of(&params) {
        Ok(p) => p,
        Err(e) => return error(&e),
    };
    match state.limits.delete(&domain, &path, &by).await {
        Ok(change) => Json(change).into_response(),
        Err(e) => error(&e),
    }
}

/// `GET /v1/limits/{domain}/history?entry=…&limit=`: the path's last changes, newest
/// first (who, when, before and after), among the last 10,000 of every path.
pub(super) async fn history(
    State(state): State<Arc<AppState>>,
    Path(domain): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let params = params(query.as_deref());
    let path = match path_of(&params) {
        Ok(p) => p,
        Err(e) => return error(&e),
    };
    let limit = match count(&params, 20, 0, crate::limits::LOG_MAX) {
        Ok(n) => n,
        Err(e) => return error(&e),
    };
    Json(serde_json::json!({
        "domain": domain,
        "path": crate::limits::path_text(&path),
        "changes": state.limits.history(&domain, &path, limit),
    }))
    .into_response()
}

/// The `limit` parameter: `default` when absent, else a whole number in `min..=max`
/// (the bounds the OpenAPI document states), or a 400 naming the field.
fn count(
    params: &[(String, String)],
    default: usize,
    min: usize,
    max: usize,
) -> Result<usize, LimitsError> {
    match param(params, "limit").map(str::parse::<usize>) {
        None => Ok(default),
        Some(Ok(n)) if (min..=max).contains(&n) => Ok(n),
        Some(_) => Err(LimitsError::Invalid(vec![
            spillway_policy::overrides::OverrideError {
                field: "limit".into(),
                message: format!("a whole number from {min} to {max}"),
            },
        ])),
    }
}
