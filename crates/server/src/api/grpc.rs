//! Envoy's `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, and the gRPC
//! health service (names `""`, `ratelimit` as the reference registers it, and the
//! rate limit service's full name).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, Response};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use prost::Message;
use tracing::Instrument;

use super::wire;
use crate::service::CheckError;
use crate::service::request::{CheckRequest, Code};
use crate::state::AppState;
use crate::{metrics, otel};

/// The most bytes one gRPC request may take, decoded. Envoy copies request headers
/// into descriptors (its default bound on a request's headers is 60 KiB), and a
/// refused call is one Envoy under `failure_mode_deny: false` admits: this leaves room
/// for a 60 KiB header in a dozen descriptors, and still bounds what one call holds.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

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
        let span = otel::decision_span("ShouldRateLimit", || {
            request.metadata().clone().into_headers()
        });
        let stats = self.state.service.stats();
        // The reference's response time, only when its stats are kept.
        #[allow(clippy::disallowed_methods)] // a latency for the stats, not a decision
        let started = stats.on().then(std::time::Instant::now);
        let checked = async {
            let (req, request_metadata) = wire::request_with_metadata(
                request.into_inner(),
                self.state.service.dynamic_metadata(),
            )?;
            Ok::<_, CheckError>((
                self.state
                    .check(req, self.state.grpc_callers, Some("grpc"))
                    .await?,
                request_metadata,
            ))
        };
        let answer = match checked.instrument(span.clone()).await {
            Ok((mut r, request_metadata)) => {
                otel::outcome(&span, Ok(r.overall == Code::Ok));
                // Admitted after a wait: the OK is held for it (Envoy's filter
                // `timeout` must be longer than `max_wait`).
                super::respond::wait_out("grpc", &mut r, &self.state.waiters).await;
                Ok(tonic::Response::new(wire::response(
                    &r,
                    &self.state.headers,
                    request_metadata,
                )))
            }
            Err(e) => {
                otel::outcome(&span, Err(e.kind()));
                if e.is_invalid() {
                    metrics::invalid_request("grpc");
                }
                if stats.on() {
                    stats.call_error(!e.is_invalid());
                }
                Err(e.grpc())
            }
        };
        if let Some(started) = started {
            stats.grpc_call(started.elapsed());
        }
        answer
    }
}

/// A `ShouldRateLimit` message, as tonic's codec and then the handler decode it.
pub fn decode(message: &[u8]) -> Result<CheckRequest, CheckError> {
    let pb = RateLimitRequest::decode(message)
        .map_err(|e| CheckError::Invalid(format!("failed to decode Protobuf message: {e}")))?;
    wire::request(pb)
}

/// The most bytes a health check's request may have: it names one service. (tonic's
/// default, 4 MiB, is reserved up front for each call that announces it.)
pub const MAX_HEALTH_MESSAGE_BYTES: usize = 1024;

/// The gRPC services (served on the gRPC port): each call answered within `deadline`
/// (or the caller's shorter `grpc-timeout`), its body included, and a malformed one
/// answered `INVALID_ARGUMENT` ([`Edge`]).
pub fn router(
    state: Arc<AppState>,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    deadline: Duration,
) -> Edge<tonic::service::Routes> {
    let rlqs = super::rlqs::server(Arc::clone(&state));
    let rls =
        RateLimitServiceServer::new(Grpc { state }).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let health = health.max_decoding_message_size(MAX_HEALTH_MESSAGE_BYTES);
    Edge {
        inner: tonic::service::Routes::new(rls)
            .add_service(health)
            .add_service(rlqs),
        cap: deadline,
    }
}

/// What every gRPC call passes, around tonic's routes: `DEADLINE_EXCEEDED` for a call
/// not done within its deadline (the service's, or the caller's shorter `grpc-timeout`:
/// a stream that sends a length prefix and then stalls would otherwise hold its buffer
/// and its stream for ever, issue #37), and [`malformed_is_invalid_argument`]. One
/// service whose future is a plain struct, not a stack of boxed middleware: it runs on
/// every decision.
#[derive(Clone, Debug)]
pub struct Edge<S> {
    inner: S,
    cap: Duration,
}

impl<S, B> tower::Service<axum::http::Request<B>> for Edge<S>
where
    S: tower::Service<
            axum::http::Request<B>,
            Response = Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        >,
{
    type Response = Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let asked = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc_timeout);
        let deadline = asked.map_or(self.cap, |d| d.min(self.cap));
        EdgeFuture {
            call: tokio::time::timeout(deadline, self.inner.call(request)),
            deadline,
        }
    }
}

pin_project_lite::pin_project! {
    /// An [`Edge`]'s call in flight.
    pub struct EdgeFuture<F> {
        #[pin]
        call: tokio::time::Timeout<F>,
        deadline: Duration,
    }
}

impl<F> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response<tonic::body::Body>, std::convert::Infallible>>,
{
    type Output = Result<Response<tonic::body::Body>, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        Poll::Ready(Ok(match std::task::ready!(this.call.poll(cx)) {
            Ok(Ok(response)) => malformed_is_invalid_argument(response),
            Ok(Err(never)) => match never {},
            Err(_) => {
                metrics::grpc_deadline_exceeded();
                tonic::Status::deadline_exceeded(format!("not done within {:?}", this.deadline))
                    .into_http()
            }
        }))
    }
}

/// gRPC's `grpc-timeout` (`100m`: up to 8 digits and a unit, H M S m u n).
fn grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// tonic answers a request body that does not decode with `INTERNAL`, and one over the
/// size limit with `OUT_OF_RANGE`; both are the caller's fault, and the protocol's code
/// for a bad request is `INVALID_ARGUMENT`.
fn malformed_is_invalid_argument<B>(mut response: Response<B>) -> Response<B> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_read_as_the_protocol_writes_them() {
        assert_eq!(grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout("250u"), Some(Duration::from_micros(250)));
        for bad in ["", "m", "100", "123456789m", "10x", "-1m"] {
            assert_eq!(grpc_timeout(bad), None, "{bad}");
        }
    }
}
