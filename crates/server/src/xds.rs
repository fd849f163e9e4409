//! Rules over xDS, as the reference takes them with `CONFIG_TYPE=GRPC_XDS_SOTW` and as
//! Envoy Gateway pushes them: an ADS state-of-the-world stream
//! (`envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources`)
//! of `RateLimitConfig` resources, one per domain, each response the whole set.
//!
//! Each response goes through the same loader as policy files (every resource parsed
//! and checked as one file would be, then assembled with the same options): a good set
//! is put in force and then ACKed; a bad one is NACKed with the reason, the set in force
//! stays, and `/v1/config` and `spillway_config_loads_total` say so. A server that sends
//! the same rejected version again is NACKed again without another log line. While the
//! stream is down the rules in force stay; it is opened again with a backoff that
//! doubles from `backoff_initial` to `backoff_max` and starts over after a response.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message;
use serde_json::{Map, json};
use spillway_policy::{LoadOptions, PolicySet};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Xds;
use crate::reload::{self, Set};
use crate::state::AppState;

/// The resource type Spillway asks for (the reference's).
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The reference-format policy file a resource stands for, as JSON (which the policy
/// loader reads as YAML).
pub fn config_json(config: &RateLimitConfig) -> serde_json::Value {
    json!({
        "domain": config.domain,
        "descriptors": config.descriptors.iter().map(descriptor_json).collect::<Vec<_>>(),
    })
}

fn descriptor_json(d: &RateLimitDescriptor) -> serde_json::Value {
    let mut m = Map::new();
    m.insert("key".into(), json!(d.key));
    if !d.value.is_empty() {
        m.insert("value".into(), json!(d.value));
    }
    if let Some(policy) = &d.rate_limit {
        m.insert("rate_limit".into(), policy_json(policy));
    }
    if !d.descriptors.is_empty() {
        let nested: Vec<_> = d.descriptors.iter().map(descriptor_json).collect();
        m.insert("descriptors".into(), json!(nested));
    }
    for (name, on) in [
        ("shadow_mode", d.shadow_mode),
        ("detailed_metric", d.detailed_metric),
        ("quota_mode", d.quota_mode),
    ] {
        if on {
            m.insert(name.into(), json!(true));
        }
    }
    if let Some(metadata) = &d.metadata {
        m.insert("metadata".into(), struct_json(metadata));
    }
    serde_json::Value::Object(m)
}

fn policy_json(p: &RateLimitPolicy) -> serde_json::Value {
    let mut m = Map::new();
    match RateLimitUnit::try_from(p.unit) {
        Ok(RateLimitUnit::Unknown) => {}
        Ok(unit) => {
            m.insert("unit".into(), json!(unit.as_str_name().to_lowercase()));
        }
        // A unit this build does not know: passed on, so the loader names it.
        Err(_) => {
            m.insert("unit".into(), json!(p.unit.to_string()));
        }
    }
    m.insert("requests_per_unit".into(), json!(p.requests_per_unit));
    if p.unlimited {
        m.insert("unlimited".into(), json!(true));
    }
    if !p.name.is_empty() {
        m.insert("name".into(), json!(p.name));
    }
    if !p.replaces.is_empty() {
        let replaces: Vec<_> = p
            .replaces
            .iter()
            .map(|r| json!({ "name": r.name }))
            .collect();
        m.insert("replaces".into(), json!(replaces));
    }
    serde_json::Value::Object(m)
}

fn struct_json(s: &Struct) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(v: &Value) -> serde_json::Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => struct_json(s),
        Some(Kind::ListValue(l)) => json!(l.values.iter().map(value_json).collect::<Vec<_>>()),
    }
}

/// One response's resources as a policy set, through the files' loader: each
/// resource is parsed and checked as a file named `xds:<name>` would be, then the
/// domains are assembled with `options`. Any mistake anywhere: no set, every mistake.
pub fn policies(
    resources: &[envoy_types::pb::google::protobuf::Any],
    options: LoadOptions,
) -> Result<PolicySet, String> {
    let mut domains = Vec::new();
    let mut errors = Vec::new();
    for (i, any) in resources.iter().enumerate() {
        if any.type_url != TYPE_URL {
            errors.push(format!(
                "resource {i} is a `{}`, not a RateLimitConfig",
                any.type_url
            ));
            continue;
        }
        let config = match RateLimitConfig::decode(any.value.as_slice()) {
            Ok(c) => c,
            Err(e) => {
                errors.push(format!("resource {i} is not a RateLimitConfig: {e}"));
                continue;
            }
        };
        let name = if config.name.is_empty() {
            format!("xds:{i}")
        } else {
            format!("xds:{}", config.name)
        };
        let text = config_json(&config).to_string();
        match spillway_policy::parse(&name, &text) {
            Ok(domain) => domains.push(domain),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    spillway_policy::assemble_with(domains, options).map_err(|e| e.to_string())
}

/// Follows the ADS server until `shutdown`, putting each good set in force.
pub fn spawn(state: Arc<AppState>, settings: Xds, shutdown: CancellationToken) {
    let server = settings.server.clone().unwrap_or_default();
    if settings.tls.is_none() && !is_loopback(&server) {
        tracing::warn!(
            target: "spillway_server",
            %server,
            "rules come over xDS in plaintext from another host: whoever is on the path can \
             read them and replace them; set xds_server_tls (and a client certificate)"
        );
    }
    tokio::spawn(async move {
        let mut client = Client {
            state,
            server,
            settings,
            acked: String::new(),
            rejected: None,
        };
        let mut backoff = client.settings.backoff_initial;
        loop {
            let outcome = tokio::select! {
                outcome = client.follow() => outcome,
                () = shutdown.cancelled() => return,
            };
            match outcome {
                // Something arrived on that stream: the next failure starts over.
                Ok(true) => backoff = client.settings.backoff_initial,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(server = %client.server, error = %e, retry_in = ?backoff, "xDS stream down; the rules in force stay")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(client.settings.backoff_max);
        }
    });
}

/// Whether `host:port` names this host (`localhost`, a loopback address).
fn is_loopback(server: &str) -> bool {
    let host = server
        .rsplit_once(':')
        .map_or(server, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

struct Client {
    state: Arc<AppState>,
    /// `host:port` of the ADS server.
    server: String,
    settings: Xds,
    /// The version in force (sent with every request, as ADS asks).
    acked: String,
    /// The last version refused, and why (so a resend is not logged again).
    rejected: Option<(String, String)>,
}

impl Client {
    /// One stream, until it ends: whether any response arrived on it.
    async fn follow(&mut self) -> Result<bool, String> {
        let channel = self.channel().await?;
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.settings.max_message_bytes);
        let (tx, rx) = mpsc::channel::<DiscoveryRequest>(4);
        tx.send(self.request(String::new(), None))
            .await
            .map_err(|e| e.to_string())?;
        let outgoing =
            futures_util::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|r| (r, rx)) });
        let mut request = tonic::Request::new(outgoing);
        for (k, v) in &self.settings.headers {
            let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
                .map_err(|e| format!("header `{k}`: {e}"))?;
            let value = v.parse().map_err(|e| format!("header `{k}`: {e}"))?;
            request.metadata_mut().insert(key, value);
        }
        let mut incoming = client
            .stream_aggregated_resources(request)
            .await
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
            .into_inner();
        tracing::info!(server = %self.server, node = %self.settings.node_id, "xDS stream open");
        let mut received = false;
        loop {
            let response = match incoming.message().await {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(received),
                Err(s) if received => {
                    tracing::warn!(error = %s.message(), "xDS stream ended");
                    return Ok(true);
                }
                Err(s) => return Err(format!("{:?}: {}", s.code(), s.message())),
            };
            received = true;
            let reply = self.take(response).await;
            if tx.send(reply).await.is_err() {
                return Ok(true);
            }
        }
    }

    /// Puts a response's set in force (or not): the ACK or NACK to send.
    async fn take(&mut self, mut response: DiscoveryResponse) -> DiscoveryRequest {
        let version = response.version_info.clone();
        let from = format!("xds {} version {version}", self.server);
        let result = if response.type_url == TYPE_URL {
            // Up to max_message_bytes of rules, parsed and checked: on a blocking
            // thread, not on a worker that answers checks meanwhile.
            let resources = std::mem::take(&mut response.resources);
            let options = self.state.load_options;
            tokio::task::spawn_blocking(move || policies(&resources, options))
                .await
                .unwrap_or_else(|e| Err(format!("the rules could not be read: {e}")))
        } else {
            Err(format!(
                "a response of type `{}` on a stream that asked for RateLimitConfig",
                response.type_url
            ))
        };
        match result {
            Ok(set) => {
                reload::apply(&self.state, Set::Live, Ok(set), &from);
                self.state.rules_arrived();
                self.acked = version;
                self.rejected = None;
                self.request(response.nonce, None)
            }
            Err(e) => {
                let again = self
                    .rejected
                    .as_ref()
                    .is_some_and(|(v, why)| *v == version && *why == e);
                if again {
                    tracing::debug!(%version, "the rejected version again; NACKed again");
                } else {
                    reload::apply(&self.state, Set::Live, Err(e.clone()), &from);
                    self.rejected = Some((version, e.clone()));
                }
                self.request(
                    response.nonce,
                    Some(Status {
                        code: tonic::Code::InvalidArgument as i32,
                        message: e,
                        details: Vec::new(),
                    }),
                )
            }
        }
    }

    fn request(&self, nonce: String, error: Option<Status>) -> DiscoveryRequest {
        let metadata = (!self.settings.node_metadata.is_empty()).then(|| Struct {
            fields: self
                .settings
                .node_metadata
                .iter()
                .map(|(k, v)| {
                    let value = Value {
                        kind: Some(Kind::StringValue(v.clone())),
                    };
                    (k.clone(), value)
                })
                .collect(),
        });
        DiscoveryRequest {
            version_info: self.acked.clone(),
            node: Some(Node {
                id: self.settings.node_id.clone(),
                metadata,
                ..Node::default()
            }),
            type_url: TYPE_URL.into(),
            response_nonce: nonce,
            error_detail: error,
            ..DiscoveryRequest::default()
        }
    }

    async fn channel(&self) -> Result<tonic::transport::Channel, String> {
        let server = &self.server;
        let Some(tls) = &self.settings.tls else {
            return tonic::transport::Channel::from_shared(format!("http://{server}"))
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| format!("cannot reach {server}: {e:?}"));
        };
        let identity = match (&tls.client_cert, &tls.client_key) {
            (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
            _ => None,
        };
        let config = spillway_redis::pem::client_config(tls.server_ca.as_deref(), identity)
            .map_err(|e| e.to_string())?;
        crate::tls::grpc_channel_named(server, tls.server_san.as_deref(), config)
            .await
            .map_err(|e| format!("cannot reach {server} over TLS: {e:?}"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_this_hosts_names_are_loopback() {
        for server in [
            "127.0.0.1:18000",
            "localhost:1",
            "[::1]:18000",
            "LOCALHOST:2",
        ] {
            assert!(super::is_loopback(server), "{server}");
        }
        for server in ["10.0.0.1:18000", "envoy-gateway:18001", "[2001:db8::1]:1"] {
            assert!(!super::is_loopback(server), "{server}");
        }
    }
}
