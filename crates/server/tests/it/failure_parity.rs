//! The service and the tower layer give the same answer for the same rule and the same
//! store failure: one table (mode × failure policy, Redis killed) run against both.
//! They share core's `GuardedStore`; this pins that they keep doing so. Its shadow rows
//! reproduce a bug the layer had: under `closed`, a shadow rule answered 503 when the
//! store was down, though shadow must never change an answer.

use crate::support;

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use serde_json::json;
use spillway_core::{Algorithm, Limit, ManualClock, Mode, OnStoreError, Timestamp};
use spillway_redis::{RedisStore, TimeSource};
use spillway_testkit::redis::{RedisServer, unique_prefix};
use spillway_tower::{KeyExtractor, RateLimitLayer, Rule};
use support::{Backing, Server};

/// Three requests for one key of a 2-per-hour limit, with the store down.
const SENT: usize = 3;

/// (mode, policy) -> the HTTP statuses of the three requests.
const TABLE: [(Mode, OnStoreError, [u16; SENT]); 6] = [
    (Mode::Enforce, OnStoreError::Open, [200, 200, 200]),
    (Mode::Enforce, OnStoreError::Closed, [503, 503, 503]),
    (Mode::Enforce, OnStoreError::Local, [200, 200, 429]),
    (Mode::Shadow, OnStoreError::Open, [200, 200, 200]),
    (Mode::Shadow, OnStoreError::Closed, [200, 200, 200]),
    (Mode::Shadow, OnStoreError::Local, [200, 200, 200]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_and_layer_answer_a_dead_store_alike() {
    let mut failures = Vec::new();
    for (row, (mode, policy, want)) in TABLE.into_iter().enumerate() {
        let service = service_statuses(row, mode, policy).await;
        let layer = layer_statuses(row, mode, policy).await;
        for (who, got) in [("service", service), ("layer", layer)] {
            if got != want {
                failures.push(format!(
                    "{who}, {mode:?} + {policy}: {got:?}, want {want:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Connects while Redis answers, then kills it (a fresh server per row).
async fn dead_store(row: usize) -> (RedisServer, RedisStore) {
    let mut redis = RedisServer::start();
    let store = RedisStore::builder(redis.url())
        .prefix(unique_prefix(&format!("parity{row}")))
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_millis(300))
        .build()
        .await
        .expect("connect to the test Redis");
    redis.kill();
    (redis, store)
}

async fn service_statuses(row: usize, mode: Mode, policy: OnStoreError) -> Vec<u16> {
    let mode = mode.name();
    let yaml = format!(
        "domain: p\ndescriptors:\n  - key: k\n    mode: {mode}\n    on_store_error: {policy}\n    \
         limits: [{{ algorithm: fixed_window, limit: 2, window: 1h }}]\n"
    );
    let mut redis = RedisServer::start();
    let s = Server::start_with(
        &format!("parity{row}"),
        &[("p.yaml", &yaml)],
        Backing::Redis(redis.url()),
        |st| st.store.timeout = Duration::from_millis(300),
    )
    .await;
    redis.kill();
    let mut statuses = Vec::with_capacity(SENT);
    for _ in 0..SENT {
        let body = json!({ "domain": "p", "descriptors": [{ "entries": [{ "key": "k", "value": "v" }] }] });
        statuses.push(s.check(body).await.0);
    }
    statuses
}

async fn layer_statuses(row: usize, mode: Mode, policy: OnStoreError) -> Vec<u16> {
    let (_redis, store) = dead_store(row).await;
    let limit = Limit::new(Algorithm::FixedWindow, 2, Duration::from_secs(3600)).unwrap();
    let layer = RateLimitLayer::builder(store)
        .clock(ManualClock::new(Timestamp::from_secs(support::T0)))
        .limit(Rule::new("k", limit, KeyExtractor::header("x-k")))
        .mode(mode)
        .on_store_error(policy)
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let (addr, server) = support::serve_app(app).await;
    let http = reqwest::Client::new();
    let mut statuses = Vec::with_capacity(SENT);
    for _ in 0..SENT {
        let r = http
            .get(format!("http://{addr}/"))
            .header("x-k", "v")
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    server.abort();
    statuses
}
