//! Redis frozen mid-test under each failure policy, then back, without restarting
//! Spillway: `open` admits, `closed` answers 503 / UNAVAILABLE (never 429), `local`
//! decides with an in-process limiter; the breaker then lets a probe through and
//! decisions are store-backed again.

use crate::support;

use std::time::Duration;

use serde_json::json;
use spillway_policy::OnStoreError;
use spillway_testkit::redis::RedisServer;
use support::{Backing, Server};

const POLICY: &str = "domain: f\ndescriptors:\n  - key: k\n    limits: [{ algorithm: fixed_window, limit: 10, window: 1h }]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_policy_then_recovery() {
    for policy in [
        OnStoreError::Open,
        OnStoreError::Closed,
        OnStoreError::Local,
    ] {
        let redis = RedisServer::start();
        let s = Server::start_with(
            "failure",
            &[("f.yaml", POLICY)],
            Backing::Redis(redis.url()),
            |st| {
                st.store.on_error = policy;
                st.store.timeout = Duration::from_millis(500);
                st.store.breaker_failures = 1;
                st.store.breaker_cooldown = Duration::from_secs(1);
            },
        )
        .await;
        let hit = || {
            s.check(json!({ "domain": "f", "descriptors": [{ "entries": [{ "key": "k", "value": policy.name() }] }] }))
        };
        let (status, _, body) = hit().await;
        assert_eq!(
            (status, &body["descriptors"][0]["degraded"]),
            (200, &json!(false))
        );

        redis.signal("STOP");
        match policy {
            OnStoreError::Open => {
                for _ in 0..3 {
                    let (status, _, body) = hit().await;
                    assert_eq!(
                        (status, &body["descriptors"][0]["degraded"]),
                        (200, &json!(true)),
                        "{body}"
                    );
                }
            }
            OnStoreError::Closed => {
                let (status, _, body) = hit().await;
                assert_eq!(status, 503, "{body}");
                assert_eq!(body["error"]["kind"], "store_unavailable");
                let e = s
                    .ask_status(support::request("f", &[&[("k", "closed")]]))
                    .await
                    .unwrap_err();
                assert_eq!(e.code(), tonic::Code::Unavailable);
            }
            OnStoreError::Local => {
                // The local limiter holds the same rule: 10 admitted, then 429.
                for _ in 0..10 {
                    assert_eq!(hit().await.0, 200);
                }
                let (status, _, body) = hit().await;
                assert_eq!(
                    (status, &body["descriptors"][0]["degraded"]),
                    (429, &json!(true)),
                    "{body}"
                );
            }
        }
        let breaker = s.running.state.service.stores().breaker().state();
        assert_eq!(breaker, spillway_server::BreakerState::Open, "{policy:?}");

        redis.signal("CONT");
        s.advance(Duration::from_secs(1)); // the breaker's cool-down, on the manual clock
        let (status, _, body) = hit().await;
        assert_eq!(
            body["descriptors"][0]["degraded"],
            json!(false),
            "{policy:?} recovered: {body}"
        );
        // Redis counted 1 before the fault and this one; and also the call that timed
        // out: it was already on the socket, and Redis ran it when it woke. A timeout
        // can over-count by the calls in flight, never under-count. (The calls after it
        // found the breaker open and never reached Redis.)
        assert_eq!(
            (status, &body["descriptors"][0]["remaining"]),
            (200, &json!(7)),
            "{policy:?}: {body}"
        );
        let metrics = s.get_text("/metrics").await;
        for line in [
            "spillway_store_duration_seconds_bucket",
            "spillway_store_errors_total{store=\"main\",kind=\"timeout\"}",
            "spillway_store_errors_total{store=\"main\",kind=\"breaker_open\"}",
            &format!(
                "spillway_fallback_decisions_total{{policy=\"{}\"}}",
                policy.name()
            ),
        ] {
            assert!(metrics.contains(line), "`{line}` in\n{metrics}");
        }
        s.running.stop().await;
    }
}

/// Found by the reliability suite (`spillway-reliability faults --policy shadow`): a
/// shadow-mode rule answered 503 when the store failed under the default `closed`
/// policy. A shadow rule never changes an answer, so it lets the request through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_rule_lets_through_when_the_store_fails_even_under_closed() {
    const SHADOW: &str = "domain: f\ndescriptors:\n  - key: k\n    mode: shadow\n    limits: [{ algorithm: fixed_window, limit: 10, window: 1h }]\n";
    let redis = RedisServer::start();
    let s = Server::start_with(
        "shadow-failure",
        &[("f.yaml", SHADOW)],
        Backing::Redis(redis.url()),
        |st| {
            st.store.on_error = OnStoreError::Closed;
            st.store.timeout = Duration::from_millis(200);
        },
    )
    .await;
    let hit = || {
        s.check(json!({ "domain": "f", "descriptors": [{ "entries": [{ "key": "k", "value": "v" }] }] }))
    };
    assert_eq!(hit().await.0, 200);
    redis.signal("STOP");
    let (status, _, body) = hit().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["descriptors"][0]["degraded"], json!(true));
    let ok = s
        .ask_status(support::request("f", &[&[("k", "v")]]))
        .await
        .unwrap();
    assert_eq!(ok.overall_code, 1, "OK over gRPC too");
    redis.signal("CONT");
}

/// A caller reads that the store failed, never the store's own words (they can name
/// nodes, ports and keys with other clients' values): those go to the log. Issue #37.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_and_probes_are_told_the_store_failed_not_what_it_said() {
    let redis = RedisServer::start();
    let port = redis.url().rsplit(':').next().unwrap().to_owned();
    let s = Server::start_with(
        "failure-words",
        &[("f.yaml", POLICY)],
        Backing::Redis(redis.url()),
        |st| {
            st.store.on_error = OnStoreError::Closed;
            st.store.timeout = Duration::from_millis(500);
        },
    )
    .await;
    redis.signal("KILL");
    let body = json!({ "domain": "f", "descriptors": [{ "entries": [{ "key": "k", "value": "secret-user" }] }] });
    let (status, _, answer) = s.check(body).await;
    assert_eq!(status, 503, "{answer}");
    // A killed server is an error, or a timeout while the connection is being replaced:
    // either way the kind, and nothing of the store's own words.
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        [
            "rate limit store unavailable (error)",
            "rate limit store unavailable (timeout)"
        ]
        .contains(&message),
        "{message}"
    );
    let e = s
        .ask_status(support::request("f", &[&[("k", "secret-user")]]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert!(
        e.message().starts_with("rate limit store unavailable ("),
        "{}",
        e.message()
    );
    // Spillway's own readiness PINGs the store; the reference's health check does not.
    let r = s.http.get(s.check_url("/readyz")).send().await.unwrap();
    assert!(!r.status().is_success());
    let text = r.text().await.unwrap();
    assert!(text.contains("store unreachable"), "{text}");
    assert!(!text.contains(&port) && !text.contains("refused"), "{text}");
    let r = s
        .http
        .get(s.check_url("/healthcheck"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "a store outage leaves the process healthy");
}

/// `/healthcheck` as the reference answers it (issue #48): by default a store outage
/// leaves it at 200, and each request follows its failure policy. With
/// `health_follows_store` (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true`) it is 500 while
/// no connection is up, and a frozen store (PINGs that time out, the connection up)
/// never fails it; it is 200 again once the store is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_process_unless_told_to_follow_the_store() {
    for follows in [false, true] {
        let mut redis = RedisServer::start();
        let s = Server::start_with(
            "health",
            &[("f.yaml", POLICY)],
            Backing::Redis(redis.url()),
            |st| {
                st.store.on_error = OnStoreError::Open;
                st.store.health_follows_store = follows;
            },
        )
        .await;
        let health = || async {
            let r = s
                .http
                .get(s.check_url("/healthcheck"))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        };
        let grpc_health = || async {
            let mut client = tonic_health::pb::health_client::HealthClient::new(
                tonic::transport::Channel::from_shared(format!("http://{}", s.running.grpc_addr))
                    .unwrap()
                    .connect()
                    .await
                    .unwrap(),
            );
            let r = client
                .check(tonic_health::pb::HealthCheckRequest {
                    service: "ratelimit".into(),
                })
                .await
                .unwrap();
            r.into_inner().status
        };
        let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
        // The health reporter's first tick has run once the gRPC status says serving.
        assert!(support::eventually(|| async { grpc_health().await == serving }).await);
        assert_eq!(health().await, (200, "OK".into()));

        // Frozen: every PING times out, the connection stays up. 3 s of probes, each 200.
        redis.signal("STOP");
        for _ in 0..15 {
            assert_eq!(
                health().await.0,
                200,
                "a slow store never fails health ({follows})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        redis.signal("CONT");

        // Gone: the connection is refused.
        redis.kill();
        let (status, body) = if follows {
            assert!(support::eventually(|| async { health().await.0 == 500 }).await);
            assert_ne!(grpc_health().await, serving);
            health().await
        } else {
            // Probed every second for 3 s: never 500, and gRPC health stays serving.
            for _ in 0..15 {
                assert_eq!(health().await.0, 200, "an outage leaves health at 200");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            assert_eq!(grpc_health().await, serving);
            // Decisions follow the failure policy meanwhile (open: admitted).
            let (code, _, _) = s
                .check(json!({ "domain": "f", "descriptors": [{ "entries": [{ "key": "k", "value": "x" }] }] }))
                .await;
            assert_eq!(code, 200);
            health().await
        };
        if follows {
            assert_eq!((status, body.as_str()), (500, "store unreachable"));
        } else {
            assert_eq!((status, body.as_str()), (200, "OK"));
        }

        redis.restart();
        assert!(support::eventually(|| async { health().await.0 == 200 }).await);
        assert!(support::eventually(|| async { grpc_health().await == serving }).await);
    }
}
