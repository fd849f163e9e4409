//! The one place a [`Rejection`] becomes a response: HTTP 429 / 400 / 503 with a JSON
//! body, or for gRPC requests `RESOURCE_EXHAUSTED` / `INVALID_ARGUMENT` /
//! `UNAVAILABLE` (with the retry delay as a `google.rpc.RetryInfo` detail).

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::request::Parts;
use http::{HeaderMap, Response, StatusCode};

use crate::{LayerBody, Rejection};

/// Whether the request is gRPC (which wants HTTP 200 and a `grpc-status`).
pub(crate) fn is_grpc(parts: &Parts) -> bool {
    parts
        .headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The rate limit headers of one response (none: no allocation).
#[derive(Debug, Default)]
pub(crate) struct Headers(Vec<(&'static str, HeaderValue)>);

impl Headers {
    pub(crate) fn push(&mut self, name: &'static str, value: HeaderValue) {
        if self.0.is_empty() {
            // A style's three at most, and Retry-After.
            self.0.reserve_exact(4);
        }
        self.0.push((name, value));
    }

    /// A value of text, ASCII by construction (one that is not is left out).
    pub(crate) fn push_text(&mut self, name: &'static str, value: String) {
        if let Ok(value) = HeaderValue::try_from(value) {
            self.push(name, value);
        }
    }
}

/// The answer to a refused request, with `headers` (rate limit headers) added.
pub(crate) fn rejection<B: LayerBody>(
    parts: &Parts,
    rejection: &Rejection,
    headers: Headers,
) -> Response<B> {
    let mut response = if is_grpc(parts) {
        grpc(rejection)
    } else {
        http(rejection)
    };
    add_headers(response.headers_mut(), headers);
    response
}

/// Adds rate limit headers.
pub(crate) fn add_headers(map: &mut HeaderMap, headers: Headers) {
    for (name, value) in headers.0 {
        map.append(name, value);
    }
}

fn http<B: LayerBody>(rejection: &Rejection) -> Response<B> {
    let status = match rejection {
        Rejection::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
        Rejection::MissingKey { .. } => StatusCode::BAD_REQUEST,
        Rejection::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut body = serde_json::json!({ "error": rejection.to_string() });
    if let Rejection::Limited { limit, retry_after } = rejection {
        body["limit"] = limit.as_ref().into();
        if let Some(wait) = retry_after {
            let ms = u64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
            body["retry_after_ms"] = ms.into();
        }
    }
    let mut response = Response::new(B::from_bytes(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(feature = "tonic")]
fn grpc<B: LayerBody>(rejection: &Rejection) -> Response<B> {
    use tonic::{Code, Status};
    use tonic_types::{ErrorDetails, StatusExt};

    let message = rejection.to_string();
    let status = match rejection {
        Rejection::Limited {
            retry_after: Some(wait),
            ..
        } => Status::with_error_details(
            Code::ResourceExhausted,
            message,
            ErrorDetails::with_retry_info(Some(*wait)),
        ),
        Rejection::Limited { .. } => Status::resource_exhausted(message),
        Rejection::MissingKey { .. } => Status::invalid_argument(message),
        Rejection::Unavailable => Status::unavailable(message),
    };
    status.into_http()
}

/// Without tonic: the status in headers, no details.
#[cfg(not(feature = "tonic"))]
fn grpc<B: LayerBody>(rejection: &Rejection) -> Response<B> {
    let code = match rejection {
        Rejection::Limited { .. } => "8",
        Rejection::MissingKey { .. } => "3",
        Rejection::Unavailable => "14",
    };
    let mut response = Response::new(B::default());
    let h = response.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from_static(code));
    // grpc-message is percent-encoded; ours is printable ASCII without `%`: as is.
    if let Ok(v) = HeaderValue::try_from(rejection.to_string()) {
        h.insert("grpc-message", v);
    }
    response
}
