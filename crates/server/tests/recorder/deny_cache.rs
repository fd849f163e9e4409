//! The deny cache in the service, on a Redis of its own (so its command counts are the
//! service's): an abuser past a GCRA limit costs the store nothing until the retry time,
//! the answers stay exact, and a reload's new limits are honoured at once.

use crate::support;

use std::time::Duration;

use serde_json::json;
use spillway_testkit::redis::RedisServer;
use support::{Backing, Server};

const POLICY: &str = "domain: d\ndescriptors:\n  - key: user\n    limits: [{ name: per-minute, algorithm: gcra, limit: 10, window: 1m }]\n";

/// `spillway_deny_cache_hits_total` as `/metrics` reports it.
async fn cache_hits(s: &Server) -> u64 {
    crate::value(
        &s.get_text("/metrics").await,
        "spillway_deny_cache_hits_total",
    )
}

fn check(user: &str) -> serde_json::Value {
    json!({ "domain": "d", "descriptors": [{ "entries": [{ "key": "user", "value": user }] }] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_user_costs_no_script_calls_until_its_retry_time_or_a_reload() {
    let _turn = crate::turn().await;
    let redis = RedisServer::start();
    let s = Server::start_with(
        "deny-cache",
        &[("d.yaml", POLICY)],
        Backing::Redis(redis.url()),
        |st| st.store.timeout = Duration::from_secs(1),
    )
    .await;
    let before = redis.script_calls();
    let hits_before = cache_hits(&s).await;
    let mut allowed = 0;
    let mut retry_ms = Vec::new();
    for _ in 0..500 {
        let (status, _, body) = s.check(check("u1")).await;
        if status == 200 {
            allowed += 1;
        } else {
            assert_eq!(status, 429, "{body}");
            retry_ms.push(body["descriptors"][0]["retry_after_ms"].as_u64().unwrap());
        }
    }
    let calls = redis.script_calls() - before;
    eprintln!("500 decisions, {allowed} allowed, {calls} script calls");
    assert_eq!(allowed, 10);
    // 10 admissions and the first denial reach Redis; the other 489 are cached.
    assert!(calls <= 30, "{calls} script calls for 500 decisions");
    // The cached answers are the store's: 6 s until one more fits (the clock stands still).
    assert!(retry_ms.iter().all(|&ms| ms == 6_000), "{retry_ms:?}");
    // Counted (the recorder is shared by this file's tests: a difference).
    assert_eq!(cache_hits(&s).await - hits_before, 500 - 10 - 1);

    // At the retry time the store decides again, and admits one.
    s.advance(Duration::from_secs(6));
    assert_eq!(s.check(check("u1")).await.0, 200);
    assert_eq!(s.check(check("u1")).await.0, 429);

    // A reload's new limit is honoured at once, cached denials or not.
    for _ in 0..10 {
        assert_eq!(s.check(check("u2")).await.0, 200);
    }
    assert_eq!(s.check(check("u2")).await.0, 429);
    assert_eq!(s.check(check("u2")).await.0, 429, "now from the cache");
    // A larger burst: the GCRA state (the TAT) is kept, and now has room. The cached
    // denial of the old limit must not answer for the new one.
    let bigger = POLICY.replace("limit: 10,", "limit: 20, burst: 40,");
    let policies = spillway_policy::parse("d.yaml", &bigger).unwrap();
    s.running
        .state
        .service
        .replace_policies(spillway_policy::assemble(vec![policies]).unwrap());
    assert_eq!(s.check(check("u2")).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_deny_cache_every_decision_is_a_script_call() {
    let _turn = crate::turn().await;
    let redis = RedisServer::start();
    let s = Server::start_with(
        "no-deny-cache",
        &[("d.yaml", POLICY)],
        Backing::Redis(redis.url()),
        |st| {
            st.store.timeout = Duration::from_secs(1);
            st.store.deny_cache_bytes = 0;
        },
    )
    .await;
    let before = redis.script_calls();
    for _ in 0..50 {
        s.check(check("u3")).await;
    }
    // One more when the first call finds the script not loaded (EVALSHA, then EVAL), on
    // a server without functions.
    let calls = redis.script_calls() - before;
    assert!((50..=51).contains(&calls), "{calls}");
}
