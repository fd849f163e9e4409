//! The ceilings the service is measured against: the same accept loop answering without
//! deciding anything — 200 to every `POST` on HTTP, `OK` to every `ShouldRateLimit` on
//! gRPC (tonic's codec, routes and HTTP/2). What a decision costs above these is the
//! service's own (the benchmark `service` and the example `trivial`).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// Answers `200 ok` to every `POST`.
pub fn http() -> axum::Router {
    axum::Router::new().fallback(axum::routing::post(|| async { "ok" }))
}

/// Answers `OK` to every `ShouldRateLimit`, without looking at the request.
pub fn grpc() -> axum::Router {
    tonic::service::Routes::new(grpc_service()).into_axum_router()
}

/// The same answer as a tonic service, for servers other than Spillway's accept loop
/// (`tonic::transport::Server`, as Limitador serves it: the example `trivial`).
pub fn grpc_service() -> RateLimitServiceServer<impl RateLimitService> {
    RateLimitServiceServer::new(Ok)
}

struct Ok;

#[tonic::async_trait]
impl RateLimitService for Ok {
    async fn should_rate_limit(
        &self,
        _: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Result::Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        }))
    }
}
