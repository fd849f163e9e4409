//! What `bench` loads: a store called directly, policies decided in process on a store,
//! or a running service over HTTP or gRPC. Each answers one request for one key:
//! admitted, rejected, or an error of a named kind.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use http_body_util::{BodyExt, Full};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use spillway_core::{Clock, Guard, Key, Limit, Request, Store, SystemClock, Unanswered};
use spillway_server::{AnyStore, CheckRequest, Code, Descriptor, Service, Stores};
use tonic::transport::Channel;

use crate::args::ClientTls;

/// A request's hold of a `concurrency` limit (`--hold`): the descriptor key that
/// carries its id (a service's), and the id.
#[derive(Clone, Copy)]
pub struct HoldId<'a> {
    pub key: &'a str,
    pub id: &'a str,
}

/// One request's result.
pub enum Outcome {
    Admitted,
    /// Admitted after this wait (a rule's `max_wait`).
    Waited(Duration),
    Rejected,
    Error(&'static str),
}

/// The members requests bring to a `distinct` limit: `count` of them, in turn, so
/// every one comes back at the same rate.
pub struct Members {
    pub count: u64,
    next: AtomicU64,
}

impl Members {
    pub fn new(count: u64) -> Members {
        Members {
            count: count.max(1),
            next: AtomicU64::new(0),
        }
    }

    fn next(&self) -> [u8; 8] {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        (n % self.count).to_le_bytes()
    }
}

pub enum Target {
    /// One limit, straight on a store; a `distinct` limit's requests bring members.
    Store {
        store: AnyStore,
        limit: Limit,
        members: Members,
    },
    /// One limit on a store, shared by a lease or sync (through the guarded store, as
    /// the service shares it).
    Shared {
        stores: Arc<Stores>,
        limit: Limit,
        guard: Guard,
    },
    /// Policies decided in this process, on a store, as `serve` decides them.
    Service {
        service: Box<Service>,
        domain: String,
        key_name: String,
    },
    /// `POST /v1/check` of a running service (and `/v1/release`, `release`).
    Http {
        client: Box<crate::client::HttpClient>,
        uri: hyper::Uri,
        release: hyper::Uri,
        domain: String,
        key_name: String,
    },
    /// `ShouldRateLimit` of a running service, over a few shared HTTP/2 connections.
    Grpc {
        clients: Vec<RateLimitServiceClient<Channel>>,
        domain: String,
        key_name: String,
    },
}

/// Flushes `stores`' sync counts while the bench holds them.
pub async fn sync(stores: Weak<Stores>) {
    spillway_core::sharing::every_tick(|| {
        let stores = stores.upgrade();
        async move {
            let Some(stores) = stores else { return false };
            stores.flush(SystemClock.now()).await;
            true
        }
    })
    .await;
}

impl Target {
    pub async fn grpc(
        tls: &ClientTls,
        authority: &str,
        over_tls: bool,
        domain: String,
        key_name: String,
    ) -> anyhow::Result<Target> {
        let mut clients = Vec::new();
        for _ in 0..4 {
            let channel = tls.grpc_channel(authority, over_tls).await?;
            clients.push(RateLimitServiceClient::new(channel));
        }
        Ok(Target::Grpc {
            clients,
            domain,
            key_name,
        })
    }

    pub fn http(
        tls: &ClientTls,
        base: &str,
        over_tls: bool,
        domain: String,
        key_name: String,
    ) -> anyhow::Result<Target> {
        let client = tls.http_client(base, over_tls)?;
        let uri = format!("{base}/v1/check").parse()?;
        let release = format!("{base}/v1/release").parse()?;
        Ok(Target::Http {
            client: Box::new(client),
            uri,
            release,
            domain,
            key_name,
        })
    }

    /// One request of cost 1 for `key` (taking the hold `hold` names), bounded by
    /// `timeout`.
    pub async fn call(
        &self,
        key: &Key,
        worker: usize,
        timeout: Duration,
        hold: Option<HoldId<'_>>,
    ) -> Outcome {
        let call = self.call_unbounded(key, worker, hold, false);
        match tokio::time::timeout(timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Error("timeout"),
        }
    }

    /// Gives back `key`'s hold `hold` (`/v1/release`, a descriptor led by `release`),
    /// bounded by `timeout`.
    pub async fn release(
        &self,
        key: &Key,
        worker: usize,
        timeout: Duration,
        hold: HoldId<'_>,
    ) -> Outcome {
        let call = self.call_unbounded(key, worker, Some(hold), true);
        match tokio::time::timeout(timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Error("timeout"),
        }
    }

    async fn call_unbounded(
        &self,
        key: &Key,
        worker: usize,
        hold: Option<HoldId<'_>>,
        release: bool,
    ) -> Outcome {
        // A service's descriptor: the key, then the hold's id; a release leads with
        // `release`.
        let entries = |key_name: &str| {
            let mut entries = vec![(key_name.to_owned(), key.as_str().to_owned())];
            if let Some(h) = hold {
                entries.push((h.key.to_owned(), h.id.to_owned()));
            }
            if release {
                entries.insert(0, ("release".to_owned(), "1".to_owned()));
            }
            entries
        };
        let admitted = |yes: bool| {
            if yes {
                Outcome::Admitted
            } else {
                Outcome::Rejected
            }
        };
        match self {
            Target::Store {
                store,
                limit,
                members,
            } => {
                let member = members.next();
                let mut request = Request::new(key, limit, 1);
                if limit.algorithm().counts_members() {
                    request = request.with_member(&member);
                }
                if let Some(h) = hold {
                    request = match release {
                        true => Request::release(key, limit, h.id.as_bytes()),
                        false => request.with_member(h.id.as_bytes()),
                    };
                }
                match store.check_one(request, SystemClock.now()).await {
                    Ok(d) if d.allowed() && !d.wait.is_zero() => Outcome::Waited(d.wait),
                    Ok(d) => admitted(d.allowed()),
                    Err(e) if e.is_transient() => Outcome::Error("store_unavailable"),
                    Err(_) => Outcome::Error("store_error"),
                }
            }
            Target::Shared {
                stores,
                limit,
                guard,
            } => {
                let request = [Request::new(key, limit, 1)];
                match stores
                    .decide(&request, std::slice::from_ref(guard), SystemClock.now())
                    .await
                {
                    Ok(answer) => match answer.batch.decisions.iter().map(|d| d.wait).max() {
                        Some(wait) if answer.batch.allowed() && !wait.is_zero() => {
                            Outcome::Waited(wait)
                        }
                        _ => admitted(answer.batch.allowed()),
                    },
                    Err(Unanswered::Invalid(_)) => Outcome::Error("invalid_request"),
                    Err(Unanswered::Unavailable(_)) => Outcome::Error("store_unavailable"),
                }
            }
            Target::Service {
                service,
                domain,
                key_name,
            } => {
                let req = CheckRequest {
                    domain: domain.clone(),
                    descriptors: vec![Descriptor {
                        entries: entries(key_name),
                        ..Default::default()
                    }],
                    hits: 1,
                    ..Default::default()
                };
                let answer = match req.validate() {
                    Ok(req) => service.check(&req).await,
                    Err(e) => Err(e),
                };
                match answer {
                    Ok(r) if r.overall == Code::Ok && !r.wait.is_zero() => Outcome::Waited(r.wait),
                    Ok(r) => admitted(r.overall == Code::Ok),
                    Err(spillway_server::CheckError::Invalid(_)) => {
                        Outcome::Error("invalid_request")
                    }
                    Err(spillway_server::CheckError::Unavailable(_)) => {
                        Outcome::Error("store_unavailable")
                    }
                }
            }
            Target::Http {
                client,
                uri,
                release: release_uri,
                domain,
                key_name,
            } => {
                // `/v1/release` marks every descriptor itself.
                let entries: Vec<_> = (entries(key_name).into_iter())
                    .filter(|(k, _)| !(release && k == "release"))
                    .map(|(key, value)| serde_json::json!({ "key": key, "value": value }))
                    .collect();
                let body = serde_json::json!({
                    "domain": domain,
                    "descriptors": [{ "entries": entries }],
                });
                let uri = if release { release_uri } else { uri };
                let req = hyper::Request::post(uri.clone())
                    .header("content-type", "application/json")
                    .body(Full::new(body.to_string().into()))
                    .expect("a valid request");
                let Ok(response) = client.request(req).await else {
                    return Outcome::Error("connect");
                };
                let status = response.status().as_u16();
                if response.into_body().collect().await.is_err() {
                    return Outcome::Error("body");
                }
                match status {
                    200 => Outcome::Admitted,
                    429 => Outcome::Rejected,
                    400..=499 => Outcome::Error("http_4xx"),
                    503 => Outcome::Error("http_503"),
                    _ => Outcome::Error("http_5xx"),
                }
            }
            Target::Grpc {
                clients,
                domain,
                key_name,
            } => {
                let mut client = clients[worker % clients.len()].clone();
                let req = RateLimitRequest {
                    domain: domain.clone(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: (entries(key_name).into_iter())
                            .map(|(key, value)| Entry { key, value })
                            .collect(),
                        ..Default::default()
                    }],
                    hits_addend: 1,
                };
                match client.should_rate_limit(req).await {
                    Ok(r) => admitted(r.into_inner().overall_code != 2),
                    Err(s) if s.code() == tonic::Code::Unavailable => {
                        Outcome::Error("grpc_unavailable")
                    }
                    Err(s) if s.code() == tonic::Code::InvalidArgument => {
                        Outcome::Error("grpc_invalid_argument")
                    }
                    Err(_) => Outcome::Error("grpc_error"),
                }
            }
        }
    }
}
