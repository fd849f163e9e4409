//! What the layer adds to an axum handler on the memory store, beside `tower_governor`
//! (governor's tower layer) in the same run: the same router bare, with our layer and
//! with theirs, each keyed by the `x-api-key` header, headers on allowed responses off
//! and on, on one key and on 100k keys, called in process (no sockets). Every call is
//! admitted (the hot path). A layer's overhead is its time less the bare router's.
//! Last, ours again in an app that exports its metrics (a Prometheus recorder installed:
//! `spillway_exported`), which counts every request.
//!
//! `cargo bench -p spillway-tower --bench overhead`

use std::time::Duration;

use axum::{Router, body::Body, routing::get};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderValue, Request};
use spillway_core::{Algorithm, Limit, MemoryStore};
use spillway_tower::{KeyExtractor, RateLimitLayer, Rule};
use tower::ServiceExt;
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

fn router() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

/// Ours: a limit no benchmark reaches, so every call takes the admitted path. GCRA
/// counts whole µs, so one key admits at most a million a second on average: the burst
/// of 10^9 over 1,000 s leaves 1,000 s of slack, more than any run.
fn spillway(headers: bool) -> Router {
    let limit = Limit::new(Algorithm::Gcra, 1_000_000_000, Duration::from_secs(1_000)).unwrap();
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(Rule::new(
            "per-key",
            limit,
            KeyExtractor::header("x-api-key"),
        ))
        .headers_on_allowed(headers)
        .build()
        .unwrap();
    router().layer(layer)
}

/// tower_governor's key: the header's text, as its users write it.
#[derive(Clone, Debug)]
struct ApiKey;

impl tower_governor::key_extractor::KeyExtractor for ApiKey {
    type Key = String;

    fn extract<T>(&self, req: &Request<T>) -> Result<String, tower_governor::GovernorError> {
        req.headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(tower_governor::GovernorError::UnableToExtractKey)
    }
}

/// Theirs, with the same reach: 10^9 a second, a burst of 10^9.
fn tower_governor(headers: bool) -> Router {
    let mut builder = GovernorConfigBuilder::default().key_extractor(ApiKey);
    builder.per_nanosecond(1).burst_size(1_000_000_000);
    if headers {
        router().layer(GovernorLayer::new(builder.use_headers().finish().unwrap()))
    } else {
        router().layer(GovernorLayer::new(builder.finish().unwrap()))
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let keys: Vec<HeaderValue> = (0..100_000)
        .map(|i| HeaderValue::try_from(format!("key-{i}")).unwrap())
        .collect();
    let mut group = c.benchmark_group("tower");
    let apps = [
        ("baseline", router()),
        ("spillway", spillway(false)),
        ("spillway_headers", spillway(true)),
        ("tower_governor", tower_governor(false)),
        ("tower_governor_headers", tower_governor(true)),
    ];
    let mut measure = |name: &str, app: Router| {
        for (shape, n) in [("1_key", 1), ("100k_keys", keys.len())] {
            let mut i = 0;
            group.bench_function(format!("{name}/{shape}"), |b| {
                b.to_async(&rt).iter(|| {
                    i = (i + 1) % n;
                    let mut request = Request::get("/").body(Body::empty()).unwrap();
                    request.headers_mut().insert("x-api-key", keys[i].clone());
                    let app = app.clone();
                    async move {
                        let response = app.oneshot(request).await.unwrap();
                        assert!(response.status().is_success(), "{response:?}");
                        response
                    }
                });
            });
        }
    };
    for (name, app) in apps {
        measure(name, app);
    }
    // The recorder is process-wide: installed after the others ran.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    metrics::set_global_recorder(recorder).unwrap();
    measure("spillway_exported", spillway(false));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
