//! An ADS server for tests, as Envoy Gateway's serves the rate limit service:
//! state of the world, `RateLimitConfig` resources, each response the whole snapshot
//! (version and nonce from the snapshot's version). Serve its router (`router()`) as a
//! test likes: over mutual TLS with `spillway_server::listen::serve`, as Envoy Gateway.

use std::pin::Pin;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use futures_util::Stream;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// The resource type served.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// A version and its whole set of resources; `None`: nothing to send yet.
pub type Snapshot = Option<(String, Vec<RateLimitConfig>)>;

/// An ADS server: sends the current snapshot on every stream and every change; every
/// request it gets goes to `requests`. Its streams end when `stop` is cancelled (a
/// server that goes away ends its streams, where a graceful drain would wait on them).
#[derive(Clone, Debug)]
pub struct Ads {
    snapshot: watch::Receiver<Snapshot>,
    requests: mpsc::UnboundedSender<DiscoveryRequest>,
    stop: CancellationToken,
}

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Responses>, tonic::Status> {
        let mut incoming = request.into_inner();
        let requests = self.requests.clone();
        tokio::spawn(async move {
            while let Ok(Some(r)) = incoming.message().await {
                let _ = requests.send(r);
            }
        });
        let (snapshot, stop) = (self.snapshot.clone(), self.stop.clone());
        let responses = futures_util::stream::unfold(
            (snapshot, stop, true),
            |(mut snapshot, stop, first)| async move {
                let changed = async {
                    if !first {
                        snapshot.changed().await.ok()?;
                    }
                    loop {
                        let current = snapshot.borrow_and_update().clone();
                        if let Some((version, configs)) = current {
                            return Some(response(&version, &configs));
                        }
                        snapshot.changed().await.ok()?;
                    }
                };
                let next = tokio::select! {
                    next = changed => next?,
                    () = stop.cancelled() => return None,
                };
                Some((Ok(next), (snapshot, stop, false)))
            },
        );
        Ok(tonic::Response::new(Box::pin(responses)))
    }

    type DeltaAggregatedResourcesStream =
        Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, tonic::Status>> + Send>>;

    async fn delta_aggregated_resources(
        &self,
        _: tonic::Request<tonic::Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("state of the world only"))
    }
}

pub fn response(version: &str, configs: &[RateLimitConfig]) -> DiscoveryResponse {
    DiscoveryResponse {
        version_info: version.into(),
        resources: configs
            .iter()
            .map(|c| Any {
                type_url: TYPE_URL.into(),
                value: c.encode_to_vec(),
            })
            .collect(),
        type_url: TYPE_URL.into(),
        nonce: format!("nonce-{version}"),
        ..DiscoveryResponse::default()
    }
}

impl Ads {
    /// A server sending `snapshot`'s versions, every request it gets into `requests`.
    pub fn new(
        snapshot: watch::Receiver<Snapshot>,
        requests: mpsc::UnboundedSender<DiscoveryRequest>,
    ) -> Ads {
        Ads {
            snapshot,
            requests,
            stop: CancellationToken::new(),
        }
    }

    /// The same server with streams of their own, ended by `stop` (a restart).
    pub fn stopped_by(&self, stop: CancellationToken) -> Ads {
        Ads {
            stop,
            ..self.clone()
        }
    }

    /// Its gRPC routes.
    pub fn router(self) -> tonic::service::Routes {
        tonic::service::Routes::new(AggregatedDiscoveryServiceServer::new(self))
    }
}

/// Envoy Gateway's shape of a rule: domain = the listener (`default/eg/http`), the
/// route's name as key and value, then a header match (`rule-0-match-0`) carrying
/// `per_minute`.
pub fn gateway_config(per_minute: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: "default/eg/http".into(),
        domain: "default/eg/http".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "httproute/default/api/rule/0".into(),
            value: "httproute/default/api/rule/0".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "rule-0-match-0".into(),
                rate_limit: Some(RateLimitPolicy {
                    unit: RateLimitUnit::Minute as i32,
                    requests_per_unit: per_minute,
                    ..RateLimitPolicy::default()
                }),
                ..RateLimitDescriptor::default()
            }],
            ..RateLimitDescriptor::default()
        }],
    }
}
