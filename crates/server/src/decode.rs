//! Each API's request bytes to a [`CheckRequest`], as the endpoints decode them before
//! deciding (public for the fuzz targets in `fuzz/`). A decoded request is not yet
//! checked against the service's bounds; [`CheckRequest::validate`] does that, as
//! `Service::check` does first.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;

use crate::{CheckError, CheckRequest, json, wire};

/// A `POST /v1/check` body.
pub fn v1_check(body: &[u8]) -> Result<CheckRequest, CheckError> {
    let v1: crate::http::V1Request = serde_json::from_slice(body)
        .map_err(|e| CheckError::Invalid(format!("invalid request body: {e}")))?;
    CheckRequest::try_from(v1)
}

/// A body of the reference's `POST /json`.
pub fn reference_json(body: &[u8]) -> Result<CheckRequest, CheckError> {
    wire::request(json::decode(body).map_err(CheckError::Invalid)?)
}

/// A `ShouldRateLimit` message, as tonic's codec and then the handler decode it.
pub fn grpc(message: &[u8]) -> Result<CheckRequest, CheckError> {
    let pb = RateLimitRequest::decode(message)
        .map_err(|e| CheckError::Invalid(format!("failed to decode Protobuf message: {e}")))?;
    wire::request(pb)
}
