//! The tower layer sharing a Redis with the service follows the service's overrides
//! (`limits::Follower`, `Rule::overridden_by`): a key's limit set by the admin API
//! decides that key's requests in the layer within a poll, its headers say it, a
//! sibling key keeps the layer's own limit, and a deleted override gives it back.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use serde_json::json;
use spillway_core::{Algorithm, Clock, Limit, ManualClock, SystemClock, Timestamp};
use spillway_redis::{RedisStore, TimeSource};
use spillway_server::limits::Follower;
use spillway_tower::{KeyExtractor, RateLimitLayer, Rule};

use crate::support;

const POLICY: &str = "domain: o
descriptors:
  - key: api_key
    limits:
      - { name: per_key, algorithm: gcra, limit: 5, window: 1m }
";

/// The statuses of `n` requests with key `key`, and the last one's `RateLimit-Policy`.
async fn statuses(http: &reqwest::Client, url: &str, key: &str, n: usize) -> (Vec<u16>, String) {
    let (mut out, mut policy) = (Vec::new(), String::new());
    for _ in 0..n {
        let r = http.get(url).header("x-api-key", key).send().await.unwrap();
        out.push(r.status().as_u16());
        policy = r.headers()["ratelimit-policy"].to_str().unwrap().to_owned();
    }
    (out, policy)
}

#[tokio::test]
async fn the_tower_layer_on_the_services_redis_follows_its_overrides() {
    let url = spillway_testkit::redis::standalone_url();
    let prefix = spillway_testkit::redis::unique_prefix("overrides-tower");
    let dir = support::tempdir("overrides-tower");
    std::fs::write(dir.join("o.yaml"), POLICY).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let service = support::start_on_redis(&url, &prefix, &dir, &clock).await;

    // The layer: its own Redis connection (the same prefix), the service's overrides
    // followed, 5 a minute per key unless a key has its own.
    let store = RedisStore::builder(&url)
        .prefix(&prefix)
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let overrides = Arc::new(Follower::redis(&store, "").await.unwrap());
    let limit = Limit::new(Algorithm::Gcra, 5, Duration::from_secs(60)).unwrap();
    let rule = Rule::new("per_key", limit, KeyExtractor::header("x-api-key")).overridden_by({
        let overrides = Arc::clone(&overrides);
        move |key| overrides.limit("o", &[("api_key", key)], "per_key")
    });
    // Whether the follower has `key`'s override now (what the layer asks per request).
    let has = |key: &str| {
        overrides
            .limit("o", &[("api_key", key)], "per_key")
            .is_some()
    };
    let layer = RateLimitLayer::builder(store)
        .clock(clock.clone())
        .limit(rule)
        .headers_on_allowed(true)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let (addr, server) = support::serve_app(app).await;
    let http = reqwest::Client::new();
    let app_url = format!("http://{addr}/");

    // k1 raised to 8 a minute by one call on the service's admin API.
    let admin = format!(
        "http://{}/v1/limits/o",
        service.admin_addr.expect("an admin listener")
    );
    let raised = json!({
        "entries": [{ "key": "api_key", "value": "k1" }],
        "limits": [{ "name": "per_key", "algorithm": "gcra", "limit": 8, "window": "1m" }],
    });
    let set_at = SystemClock.now();
    let r = http.put(&admin).json(&raised).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // The follower applies it at its next poll.
    let seen = support::eventually(|| std::future::ready(has("k1"))).await;
    assert!(seen, "the follower never saw the override");
    let after = SystemClock.now().duration_since(set_at);
    eprintln!("the follower applied the override after {after:?}");
    let (k1, policy) = statuses(&http, &app_url, "k1", 9).await;
    assert_eq!(
        k1,
        [200, 200, 200, 200, 200, 200, 200, 200, 429],
        "k1 has its own 8"
    );
    assert!(
        policy.contains("q=8"),
        "k1's headers say its own limit: {policy}"
    );
    let (k2, policy) = statuses(&http, &app_url, "k2", 6).await;
    assert_eq!(k2, [200, 200, 200, 200, 200, 429], "k2 keeps the layer's 5");
    assert!(policy.contains("q=5"), "{policy}");

    // Deleted: k3 set to 1, seen, then removed; once the follower has the delete, k3
    // has the layer's 5.
    let one = json!({
        "entries": [{ "key": "api_key", "value": "k3" }],
        "limits": [{ "name": "per_key", "algorithm": "gcra", "limit": 1, "window": "1m" }],
    });
    assert_eq!(
        http.put(&admin).json(&one).send().await.unwrap().status(),
        200
    );
    assert!(support::eventually(|| std::future::ready(has("k3"))).await);
    let r = http
        .delete(format!("{admin}?entry=api_key=k3"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let gone = support::eventually(|| std::future::ready(!has("k3"))).await;
    assert!(gone, "the follower never saw the delete");
    let (k3, policy) = statuses(&http, &app_url, "k3", 6).await;
    assert_eq!(k3, [200, 200, 200, 200, 200, 429], "k3 back to 5: {policy}");
    server.abort();
    service.stop().await;
}
