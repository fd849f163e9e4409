//! What the layer adds to an axum handler on the memory store: the same router with
//! and without it, called in process (no sockets), one key and 100k keys. Every call
//! is admitted (the hot path). The overhead is the difference between the two.
//!
//! `cargo bench -p spillway-tower --bench overhead`

use std::time::Duration;

use axum::{Router, body::Body, routing::get};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderValue, Request};
use spillway_core::{Algorithm, Limit, MemoryStore};
use spillway_tower::{KeyExtractor, RateLimitLayer, Rule};
use tower::ServiceExt;

fn router() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

fn layered() -> Router {
    // A limit no benchmark reaches: every call takes the admitted path.
    let limit = Limit::new(Algorithm::Gcra, 1_000_000_000, Duration::from_secs(1)).unwrap();
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(Rule::new(
            "per-key",
            limit,
            KeyExtractor::header("x-api-key"),
        ))
        .build()
        .unwrap();
    router().layer(layer)
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
    for (name, app) in [("baseline", router()), ("layer", layered())] {
        for (shape, n) in [("1_key", 1), ("100k_keys", keys.len())] {
            let mut i = 0;
            group.bench_function(format!("{name}/{shape}"), |b| {
                b.to_async(&rt).iter(|| {
                    i = (i + 1) % n;
                    let mut request = Request::get("/").body(Body::empty()).unwrap();
                    request.headers_mut().insert("x-api-key", keys[i].clone());
                    let app = app.clone();
                    async move { app.oneshot(request).await.unwrap() }
                });
            });
        }
    }
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
