//! The layer in front of a tonic service (the gRPC health service) over a real
//! loopback connection: the peer address from tonic's `TcpConnectInfo`, a denial as
//! `RESOURCE_EXHAUSTED` with the retry delay in a `google.rpc.RetryInfo` detail, a
//! missing key as `INVALID_ARGUMENT`.

use crate::support;

use std::time::Duration;

use spillway_core::{Algorithm, MemoryStore};
use spillway_tower::{KeyExtractor, RateLimitLayer, Rule};
use support::{clock, limit, per_ip};
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

async fn serve(
    layer: RateLimitLayer<MemoryStore, spillway_core::ManualClock>,
) -> HealthClient<Channel> {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap();
    HealthClient::new(channel.connect().await.unwrap())
}

#[tokio::test]
async fn a_grpc_denial_is_resource_exhausted_with_retry_info() {
    let clock = clock();
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .clock(clock.clone())
        .limit(per_ip(limit(Algorithm::Gcra, 2, Duration::from_secs(1))))
        .build()
        .unwrap();
    let mut client = serve(layer).await;
    for _ in 0..2 {
        client.check(HealthCheckRequest::default()).await.unwrap();
    }
    let denied = client
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::ResourceExhausted, "{denied:?}");
    assert_eq!(denied.message(), "rate limited by `per-ip`");
    let retry = denied.get_details_retry_info().expect("RetryInfo detail");
    assert_eq!(retry.retry_delay, Some(Duration::from_millis(500)));
    assert_eq!(
        denied.metadata().get("ratelimit").unwrap(),
        r#""per-ip";r=0;t=1"#
    );

    clock.advance(Duration::from_millis(500));
    client.check(HealthCheckRequest::default()).await.unwrap();
}

#[tokio::test]
async fn a_grpc_request_without_its_key_is_invalid_argument() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .clock(clock())
        .limit(Rule::new(
            "per-tenant",
            limit(Algorithm::FixedWindow, 5, Duration::from_secs(60)),
            KeyExtractor::header("x-tenant"),
        ))
        .build()
        .unwrap();
    let mut client = serve(layer).await;
    let err = client
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("`x-tenant` header"),
        "{}",
        err.message()
    );

    let mut request = tonic::Request::new(HealthCheckRequest::default());
    request
        .metadata_mut()
        .insert("x-tenant", "acme".parse().unwrap());
    client.check(request).await.unwrap();
}
