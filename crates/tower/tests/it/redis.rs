//! The layer on real Redis: two app instances (two layers, two connections) sharing
//! one limit on standalone Redis and on Redis Cluster, under concurrency; and the
//! failure policies while a Redis process is frozen with SIGSTOP, then thawed.

use crate::support;

use std::time::Duration;

use spillway_core::ManualClock;
use spillway_redis::{RedisStore, TimeSource};
use spillway_testkit::redis::{RedisServer, cluster_url, standalone_url, unique_prefix};
use spillway_tower::{KeyExtractor, OnStoreError, RateLimitLayer, Rule};
use support::{Client, clock, header, per_ip, per_minute, serve_layer};
use tokio::task::JoinSet;

async fn store(url: &str, prefix: &str, timeout: Duration) -> RedisStore {
    RedisStore::builder(url)
        .prefix(prefix)
        .time_source(TimeSource::Caller)
        .timeout(timeout)
        .build()
        .await
        .expect("connect to the test Redis")
}

/// An app instance on its own Redis connection.
async fn instance(url: &str, prefix: &str, clock: &ManualClock, limit: u64) -> Client {
    let layer = RateLimitLayer::builder(store(url, prefix, Duration::from_secs(1)).await)
        .clock(clock.clone())
        .limit(Rule::new(
            "per-key",
            per_minute(limit),
            KeyExtractor::header("x-api-key"),
        ))
        // The first calls on a fresh connection load the script, 30 at once: give them
        // the store's time, and make any failure a 503 rather than a fail-open 200
        // that would pass for a second instance's own limit (a flake seen once on a
        // debug build against a cluster started seconds before).
        .timeout(Duration::from_secs(1))
        .on_store_error(OnStoreError::Closed)
        .build()
        .unwrap();
    serve_layer(layer).await
}

async fn two_instances_share_one_limit(url: &str) {
    let prefix = unique_prefix("tower-two");
    let clock = clock();
    let a = instance(url, &prefix, &clock, 10).await;
    let b = instance(url, &prefix, &clock, 10).await;
    // 60 requests at once, half through each instance.
    let mut calls = JoinSet::new();
    for i in 0..60 {
        let client = if i % 2 == 0 { a.clone() } else { b.clone() };
        calls.spawn(async move { client.status("/", &[("x-api-key", "shared")]).await });
    }
    let statuses = calls.join_all().await;
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 429).count(),
        50,
        "{statuses:?}"
    );
    assert_eq!(a.status("/", &[("x-api-key", "other")]).await, 200);
}

#[tokio::test]
async fn two_app_instances_share_one_limit_on_standalone_redis() {
    two_instances_share_one_limit(&standalone_url()).await;
}

#[tokio::test]
async fn two_app_instances_share_one_limit_on_redis_cluster() {
    two_instances_share_one_limit(&cluster_url()).await;
}

#[tokio::test]
async fn on_cluster_limits_on_different_keys_are_refused_by_the_store() {
    let store = store(
        &cluster_url(),
        &unique_prefix("tower-slots"),
        Duration::from_secs(1),
    )
    .await;
    let layer = RateLimitLayer::builder(store)
        .clock(clock())
        .limit(per_ip(per_minute(5)))
        .limit(Rule::new(
            "per-key",
            per_minute(5),
            KeyExtractor::header("x-api-key"),
        ))
        .on_store_error(OnStoreError::Closed)
        .build()
        .unwrap();
    let client = serve_layer(layer).await;
    // `per-ip:127.0.0.1` and `per-key:k` hash to different slots: no atomic decision,
    // so the failure policy answers (here: 503), every time — the breaker stays shut.
    for _ in 0..10 {
        assert_eq!(client.status("/", &[("x-api-key", "k")]).await, 503);
    }
}

/// Each failure policy while Redis is frozen, then after it thaws.
#[tokio::test]
async fn failure_policies_while_redis_is_frozen() {
    for policy in [
        OnStoreError::Open,
        OnStoreError::Closed,
        OnStoreError::Local,
    ] {
        let redis = RedisServer::start();
        let clock = clock();
        // The store would wait 10 s; the layer gives up after 100 ms.
        let layer =
            RateLimitLayer::builder(store(&redis.url(), "tower", Duration::from_secs(10)).await)
                .clock(clock.clone())
                .limit(per_ip(per_minute(10)))
                .on_store_error(policy)
                .timeout(Duration::from_millis(100))
                .circuit_breaker(2, Duration::from_secs(1))
                .headers_on_allowed(true)
                .build()
                .unwrap();
        let client = serve_layer(layer).await;
        let first = client.get("/", &[]).await;
        assert_eq!(
            header(&first, "ratelimit"),
            r#""per-ip";r=9;t=40"#,
            "{policy:?}"
        );

        redis.signal("STOP");
        // Two timeouts open the breaker; the next two do not call the store at all.
        for i in 1..=4 {
            let r = client.get("/", &[]).await;
            match policy {
                OnStoreError::Open => {
                    assert_eq!(r.status(), 200);
                    assert!(
                        r.headers().get("ratelimit").is_none(),
                        "no decision, no headers"
                    );
                }
                OnStoreError::Closed => {
                    assert_eq!(r.status(), 503);
                    let body: serde_json::Value = r.json().await.unwrap();
                    assert_eq!(body["error"], "rate limit store unavailable");
                }
                OnStoreError::Local => {
                    assert_eq!(r.status(), 200);
                    let local = format!(r#""per-ip";r={};t=40"#, 10 - i);
                    assert_eq!(header(&r, "ratelimit"), local, "the local store decides");
                }
            }
        }

        redis.signal("CONT");
        clock.advance(Duration::from_secs(1)); // the breaker's cool-down
        let back = client.get("/", &[]).await;
        assert_eq!(back.status(), 200, "{policy:?}");
        // Store-backed again: the first call, the first that timed out (it was on
        // the wire: Redis ran it when it thawed — a timed-out call may still count),
        // and this one. The second that timed out waited behind it on the store's lane
        // (a call gone out is finished, its caller gone or not) and, its caller gone,
        // was never sent.
        assert_eq!(
            header(&back, "ratelimit"),
            r#""per-ip";r=7;t=39"#,
            "{policy:?}"
        );
    }
}

/// A shadow layer never changes an answer, not even under `closed` with Redis gone.
/// Reproduces a bug: the layer answered 503 here (the service had the same bug, fixed
/// earlier); both now decide through core's `GuardedStore`.
#[tokio::test]
async fn a_shadow_layer_lets_through_when_the_store_is_down_even_if_closed() {
    let mut redis = RedisServer::start();
    let store = store(&redis.url(), "tower-shadow", Duration::from_millis(300)).await;
    redis.kill();
    let layer = RateLimitLayer::builder(store)
        .clock(clock())
        .limit(per_ip(per_minute(1)))
        .mode(spillway_tower::Mode::Shadow)
        .on_store_error(OnStoreError::Closed)
        .build()
        .unwrap();
    let client = serve_layer(layer).await;
    assert_eq!(client.admitted(3, "/", &[]).await, 3);
}

/// The layer's deny cache: past its limit, a client costs Redis no script call until
/// its retry time (core's `GuardedStore`, as in the service), and the answers stay the
/// store's; `.deny_cache(0)` sends every request to Redis.
#[tokio::test]
async fn a_denied_client_costs_no_script_calls_until_its_retry_time() {
    // Two admissions and the first denial reach Redis; without the cache, every
    // request does. Counted from after `build()`, whose startup probe loads the script.
    for (cache, calls_wanted) in [(None, 3), (Some(0), 50)] {
        let redis = RedisServer::start();
        let store = store(&redis.url(), "tower-deny", Duration::from_secs(1)).await;
        let before = redis.script_calls();
        let mut builder = RateLimitLayer::builder(store)
            .clock(clock())
            .limit(per_ip(per_minute(2)))
            .timeout(Duration::from_secs(1));
        if let Some(bytes) = cache {
            builder = builder.deny_cache(bytes);
        }
        let client = serve_layer(builder.build().unwrap()).await;
        assert_eq!(client.admitted(50, "/", &[]).await, 2, "{cache:?}");
        let calls = redis.script_calls() - before;
        assert_eq!(calls, calls_wanted, "{cache:?}: script calls");
    }
}

/// A store that lies (`spillway_testkit::liar`): every reply no Redis sends is a store
/// error the layer's policy answers (here `Closed`: 503), never a panic; a well-formed
/// lie (a reset of 292,000 years) is believed and answered without an overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_store_is_a_store_error_and_no_panic() {
    use spillway_testkit::liar::{Liar, Lie};
    for lie in Lie::ALL {
        let liar = Liar::start(lie).await;
        let layer =
            RateLimitLayer::builder(store(&liar.url(), "lies", Duration::from_millis(200)).await)
                .clock(clock())
                .limit(Rule::new(
                    "per-key",
                    per_minute(10),
                    KeyExtractor::header("x-api-key"),
                ))
                .on_store_error(OnStoreError::Closed)
                .deny_cache(0)
                .build()
                .unwrap();
        let client = serve_layer(layer).await;
        for _ in 0..2 {
            let status = client.status("/", &[("x-api-key", "victim")]).await;
            if lie.malformed() {
                assert_eq!(status, 503, "{lie:?}");
            } else {
                assert!(matches!(status, 200 | 429), "{lie:?}: {status}");
            }
        }
    }
}
