//! Errors become HTTP statuses and gRPC codes here, and nowhere else. A denial is not
//! an error: it is a 429 / `OVER_LIMIT` answer built by the endpoints.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::service::CheckError;

impl CheckError {
    /// The gRPC status: `INVALID_ARGUMENT` for a bad request, `UNAVAILABLE` when the
    /// store failed under `on_store_error: closed` (Envoy's `failure_mode_deny` decides).
    pub fn grpc(&self) -> tonic::Status {
        match self {
            CheckError::Invalid(m) => tonic::Status::invalid_argument(m.clone()),
            CheckError::Unavailable(m) => tonic::Status::unavailable(m.clone()),
        }
    }

    /// The HTTP status of `/v1/check`: 400 for a bad request, 503 when the store failed.
    pub fn http_status(&self) -> StatusCode {
        match self {
            CheckError::Invalid(_) => StatusCode::BAD_REQUEST,
            CheckError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// A short machine-readable kind for JSON bodies.
    pub fn kind(&self) -> &'static str {
        match self {
            CheckError::Invalid(_) => "invalid_request",
            CheckError::Unavailable(_) => "store_unavailable",
        }
    }
}

/// A JSON error body: `{"error": {"kind": "...", "message": "..."}}`.
pub fn error_body(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = serde_json::json!({ "error": { "kind": kind, "message": message } });
    (status, axum::Json(body)).into_response()
}
