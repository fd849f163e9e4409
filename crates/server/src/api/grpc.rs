//! Envoy's `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, and the gRPC
//! health service (names `""`, `ratelimit` as the reference registers it, and the
//! rate limit service's full name).

use std::sync::Arc;

use axum::http::{HeaderValue, Response};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use prost::Message;

use super::wire;
use crate::metrics;
use crate::service::CheckError;
use crate::service::request::CheckRequest;
use crate::state::AppState;

/// The most bytes one gRPC request may take, decoded.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

struct Grpc {
    state: Arc<AppState>,
}

#[tonic::async_trait]
impl RateLimitService for Grpc {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        metrics::request("grpc");
        let checked = async {
            let (req, request_metadata) = wire::request_with_metadata(
                request.into_inner(),
                self.state.service.dynamic_metadata(),
            )?;
            Ok::<_, CheckError>((self.state.check(req).await?, request_metadata))
        };
        match checked.await {
            Ok((r, request_metadata)) => Ok(tonic::Response::new(wire::response(
                &r,
                &self.state.headers,
                request_metadata,
            ))),
            Err(e) => {
                if e.is_invalid() {
                    metrics::invalid_request("grpc");
                }
                Err(e.grpc())
            }
        }
    }
}

/// A `ShouldRateLimit` message, as tonic's codec and then the handler decode it.
pub fn decode(message: &[u8]) -> Result<CheckRequest, CheckError> {
    let pb = RateLimitRequest::decode(message)
        .map_err(|e| CheckError::Invalid(format!("failed to decode Protobuf message: {e}")))?;
    wire::request(pb)
}

/// The gRPC services as an axum router (served on the gRPC port).
pub fn router(
    state: Arc<AppState>,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
) -> axum::Router {
    let rls =
        RateLimitServiceServer::new(Grpc { state }).max_decoding_message_size(MAX_MESSAGE_BYTES);
    tonic::service::Routes::new(rls)
        .add_service(health)
        .into_axum_router()
        .layer(axum::middleware::map_response(
            malformed_is_invalid_argument,
        ))
}

/// tonic answers a request body that does not decode with `INTERNAL`, and one over the
/// size limit with `OUT_OF_RANGE`; both are the caller's fault, and the protocol's code
/// for a bad request is `INVALID_ARGUMENT`.
async fn malformed_is_invalid_argument<B>(mut response: Response<B>) -> Response<B> {
    let headers = response.headers_mut();
    let status = headers.get("grpc-status").and_then(|s| s.to_str().ok());
    let message = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .unwrap_or("");
    let decoding = |prefix: &str| {
        message.starts_with(prefix) || message.starts_with(&prefix.replace(' ', "%20"))
    };
    let bad_request = match status {
        Some("13") => decoding("failed to decode"),
        Some("11") => decoding("Error, decoded message length too large"),
        _ => false,
    };
    if bad_request {
        headers.insert("grpc-status", HeaderValue::from_static("3"));
    }
    response
}

/// Names the health service answers for.
pub fn health_names() -> [&'static str; 3] {
    [
        "",
        "ratelimit",
        <RateLimitServiceServer<Grpc> as NamedService>::NAME,
    ]
}

/// Sets every health name to serving or not.
pub async fn set_health(reporter: &HealthReporter, serving: bool) {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    for name in health_names() {
        reporter.set_service_status(name, status).await;
    }
}
