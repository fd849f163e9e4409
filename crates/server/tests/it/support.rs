//! Shared by the server's test files: a service on loopback ports with a manual clock,
//! an HTTP client and a gRPC client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use spillway_core::{ManualClock, MemoryStore, Timestamp};
use spillway_redis::{RedisStore, TimeSource};
use spillway_server::{AnyStore, App, Config, Running};
use spillway_testkit::tls::{Pair, client_config, https, presented};
use tonic::transport::Channel;

/// 2023-11-14T22:13:20Z: a whole minute, hour and day are easy to reason about from here.
pub const T0: u64 = 1_700_000_000;

#[derive(Debug)]
pub struct Server {
    pub running: Running,
    pub clock: ManualClock,
    pub http: reqwest::Client,
    pub dir: PathBuf,
}

/// Which store a test server uses.
#[derive(Clone, Debug)]
pub enum Backing {
    Memory,
    /// Redis at this URL, reading the manual clock.
    Redis(String),
}

impl Server {
    /// A server for the policy files in `files` (name, YAML).
    pub async fn start(name: &str, files: &[(&str, &str)], backing: Backing) -> Server {
        Server::start_with(name, files, backing, |_| {}).await
    }

    pub async fn start_with(
        name: &str,
        files: &[(&str, &str)],
        backing: Backing,
        tweak: impl FnOnce(&mut Config),
    ) -> Server {
        let dir = tempdir(name);
        for (file, yaml) in files {
            std::fs::write(dir.join(file), yaml).unwrap();
        }
        let mut settings = Config::ephemeral(&dir);
        // On Redis a generous store timeout, as `start_on_redis`'s: the default 10 ms
        // races a loaded machine (a decision answered by its failure policy instead).
        // A test of the store failing sets its own, shorter.
        if matches!(backing, Backing::Redis(_)) {
            settings.store.timeout = Duration::from_secs(5);
        }
        tweak(&mut settings);
        let clock = ManualClock::new(Timestamp::from_secs(T0));
        let store = match backing {
            Backing::Memory => AnyStore::Memory(MemoryStore::new()),
            Backing::Redis(url) => AnyStore::Redis(
                RedisStore::builder(url)
                    .prefix(spillway_testkit::redis::unique_prefix(name))
                    .time_source(TimeSource::Caller)
                    .timeout(settings.store.timeout)
                    .build()
                    .await
                    .expect("connect to the test Redis"),
            ),
        };
        // A per-second store of the test's own, as the main one: the manual clock's
        // time, and keys under the test's prefix.
        let per_second = match settings.store.per_second() {
            Some(p) => Some(AnyStore::Redis(
                RedisStore::builder(p.url)
                    .prefix(spillway_testkit::redis::unique_prefix(name))
                    .time_source(TimeSource::Caller)
                    .timeout(p.timeout)
                    .build()
                    .await
                    .expect("connect to the test's per-second Redis"),
            )),
            None => None,
        };
        let mut app = App::builder(settings)
            .store(store)
            .clock(Arc::new(clock.clone()));
        if let Some(second) = per_second {
            app = app.per_second_store(second);
        }
        let running = async { app.build().await?.start().await }
            .await
            .unwrap_or_else(|e| panic!("start: {e}"));
        Server {
            running,
            clock,
            http: reqwest::Client::new(),
            dir,
        }
    }

    /// `path` on the listener that serves it: the admin listener's pages there, the
    /// rest on the check port.
    pub fn url(&self, path: &str) -> String {
        let admin = [
            "/ui",
            "/v1/top",
            "/v1/history",
            "/v1/config",
            "/v1/explain",
            "/v1/rlqs",
            "/v1/limits",
            "/rlconfig",
        ]
        .iter()
        .any(|p| path.starts_with(p));
        match self.running.admin_addr {
            Some(addr) if admin => format!("http://{addr}{path}"),
            _ => self.check_url(path),
        }
    }

    /// `path` on the check port, whatever it is.
    pub fn check_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.http_addr)
    }

    pub async fn grpc(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.running.grpc_addr))
            .await
            .unwrap()
    }

    /// `ShouldRateLimit` with one descriptor.
    pub async fn should(&self, domain: &str, entries: &[(&str, &str)]) -> RateLimitResponse {
        self.ask(request(domain, &[entries])).await
    }

    /// `ShouldRateLimit` with any request; a gRPC error fails the test.
    pub async fn ask(&self, req: RateLimitRequest) -> RateLimitResponse {
        self.ask_status(req).await.unwrap()
    }

    /// `ShouldRateLimit` with any request, the gRPC status kept.
    pub async fn ask_status(
        &self,
        req: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        Ok(self.grpc().await.should_rate_limit(req).await?.into_inner())
    }

    /// `GET path` as text (`/metrics`, `/v1/config`, ...).
    pub async fn get_text(&self, path: &str) -> String {
        self.http
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// `POST /v1/check` with a JSON body: the status and the body.
    pub async fn check(
        &self,
        body: serde_json::Value,
    ) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
        let r = self
            .http
            .post(self.url("/v1/check"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, headers) = (r.status().as_u16(), r.headers().clone());
        (status, headers, r.json().await.unwrap())
    }

    /// `POST path` with a JSON body: the status and the body.
    pub async fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let r = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    /// Writes policy file `file` and waits until the watcher has loaded (or refused) it:
    /// what the load said.
    pub async fn rewrite(&self, file: &str, yaml: &str) -> spillway_server::LoadStatus {
        let mut changes = self.running.state.load_status.subscribe();
        let before = changes.borrow_and_update().generation;
        std::fs::write(self.dir.join(file), yaml).unwrap();
        // The watcher reports the change; no sleeping on a guess of how long that takes.
        tokio::time::timeout(
            Duration::from_secs(10),
            changes.wait_for(|st| st.generation > before),
        )
        .await
        .expect("the watcher saw the change")
        .unwrap()
        .clone()
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend: 0,
    }
}

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub fn tempdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("server-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The memory store's overrides journal, beside the policies.
    let _ = std::fs::remove_file(dir.with_extension("overrides.ndjson"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn example(path: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../examples/{path}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The backings every behaviour is checked on: memory, and the shared test Redis
/// standalone server and Cluster.
pub fn backings() -> Vec<Backing> {
    vec![
        Backing::Memory,
        Backing::Redis(spillway_testkit::redis::standalone_url()),
    ]
}

/// A service for `config` on `store`, reading `clock`, listening.
pub async fn start(
    config: Config,
    store: AnyStore,
    clock: Arc<dyn spillway_core::Clock>,
) -> Result<Running, spillway_server::StartError> {
    App::builder(config)
        .store(store)
        .clock(clock)
        .build()
        .await?
        .start()
        .await
}

/// A service for the policies in `dir` on the Redis at `url` under `prefix`, reading
/// `clock`: several with one prefix are replicas, or one started after another stopped.
/// The store timeout is generous: these check decisions, with several replicas, their
/// clients and Redis on a test machine's CPUs (a timed-out call would answer by its
/// failure policy instead).
pub async fn start_on_redis(url: &str, prefix: &str, dir: &Path, clock: &ManualClock) -> Running {
    let store = RedisStore::builder(url)
        .prefix(prefix)
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("connect to the test Redis");
    start(
        Config::ephemeral(dir),
        AnyStore::Redis(store),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"))
}

// === TLS: what the TLS test files share ===

pub const TLS_POLICY: &str = "
domain: tls
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

pub fn serving(server: &Pair) -> impl FnOnce(&mut Config) {
    let (cert, key) = (server.cert.clone(), server.key.clone());
    move |s: &mut Config| {
        s.tls.cert = Some(cert);
        s.tls.key = Some(key);
        s.listen.header_read_timeout = Duration::from_millis(300);
    }
}

pub async fn grpc_over_tls(
    addr: SocketAddr,
    config: rustls::ClientConfig,
) -> Result<String, String> {
    let channel = spillway_server::tls::grpc_channel(&addr.to_string(), config)
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    let answer = RateLimitServiceClient::new(channel)
        .should_rate_limit(request("tls", &[&[("user", "g1")]]))
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
    let code = answer.into_inner().overall_code;
    Ok(Code::try_from(code)
        .map_or("?", |c| c.as_str_name())
        .to_owned())
}

/// `GET /metrics` over TLS on `addr`, trusting `ca`, presenting `client` when given.
pub async fn scrape(addr: SocketAddr, ca: &Path, client: Option<&Pair>) -> String {
    https(addr, client_config(ca, client, &[]), "GET", "/metrics", "")
        .await
        .unwrap()
        .1
}

/// The certificate a new handshake on `addr` presents.
pub async fn served(addr: SocketAddr, ca: &Path) -> Vec<u8> {
    presented(addr, client_config(ca, None, &[])).await
}

/// Polls `condition` every 20 ms for up to 10 s (the watcher's debounce is 100 ms).
pub async fn eventually<F: std::future::Future<Output = bool>>(
    mut condition: impl FnMut() -> F,
) -> bool {
    for _ in 0..500 {
        if condition().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

// === An app of the test's own (a tower layer's, a webhook receiver) ===

/// `app` served on a free loopback port until the task is aborted: its address and task.
pub async fn serve_app(
    app: axum::Router,
) -> (SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (
        addr,
        tokio::spawn(async move { axum::serve(listener, app).await }),
    )
}
