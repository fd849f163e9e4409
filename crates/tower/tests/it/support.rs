//! Shared by the layer's test files: an axum app served on a loopback port (with the
//! peer address recorded, as `into_make_service_with_connect_info` does), an HTTP client,
//! and limits on a manual clock.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use spillway_core::{Algorithm, Clock, Limit, ManualClock, MemoryStore, Store, Timestamp};
use spillway_tower::{ClientIp, KeyExtractor, RateLimitLayer, RateLimitLayerBuilder, Rule};

/// 2023-11-14T22:13:20Z.
pub const T0: u64 = 1_700_000_000;

pub fn clock() -> ManualClock {
    ManualClock::new(Timestamp::from_secs(T0))
}

pub fn limit(algorithm: Algorithm, n: u64, window: Duration) -> Limit {
    Limit::new(algorithm, n, window).unwrap()
}

/// `n` per minute, fixed window: nothing refills during a test.
pub fn per_minute(n: u64) -> Limit {
    limit(Algorithm::FixedWindow, n, Duration::from_secs(60))
}

/// Serves `app` on a free loopback port until the test's runtime ends.
pub async fn serve(app: Router) -> Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    Client {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
    }
}

#[derive(Clone, Debug)]
pub struct Client {
    pub base: String,
    pub http: reqwest::Client,
}

impl Client {
    /// `GET path` with `headers`.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.http.get(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap()
    }

    /// The status of `GET path` with `headers`.
    pub async fn status(&self, path: &str, headers: &[(&str, &str)]) -> u16 {
        self.get(path, headers).await.status().as_u16()
    }

    /// How many of `n` calls were admitted (200).
    pub async fn admitted(&self, n: usize, path: &str, headers: &[(&str, &str)]) -> usize {
        let mut ok = 0;
        for _ in 0..n {
            ok += usize::from(self.status(path, headers).await == 200);
        }
        ok
    }
}

/// A header's value as text (panics when absent: the test expected it).
pub fn header<'r>(response: &'r reqwest::Response, name: &str) -> &'r str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no `{name}` header in {:?}", response.headers()))
        .to_str()
        .unwrap()
}

/// A layer builder on a fresh memory store and the manual clock.
pub fn builder() -> RateLimitLayerBuilder<MemoryStore, ManualClock> {
    RateLimitLayer::builder(MemoryStore::new()).clock(clock())
}

/// `limit` per client IP (the peer address), named `per-ip`.
pub fn per_ip(limit: Limit) -> Rule {
    Rule::new("per-ip", limit, KeyExtractor::client_ip(ClientIp::new()))
}

/// An app whose handler counts its calls.
pub fn app<St: Store + 'static, C: Clock + 'static>(
    layer: RateLimitLayer<St, C>,
) -> (Router, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let router = Router::new()
        .route(
            "/",
            get(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { "hello" }
            }),
        )
        .route("/upload", post(|| async { "stored" }))
        .layer(layer);
    (router, calls)
}

/// [`app`] behind `layer`, served on a loopback port.
pub async fn serve_layer<St: Store + 'static, C: Clock + 'static>(
    layer: RateLimitLayer<St, C>,
) -> Client {
    serve(app(layer).0).await
}
