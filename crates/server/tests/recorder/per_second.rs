//! A per-second Redis (issue #48; the reference's `REDIS_PERSECOND`): on two real Redis
//! servers, the rules whose window is one second keep their keys on the second only,
//! every other rule on the first only; with the second stopped, only the per-second
//! rules follow their failure policy (its breaker opens, the main one stays closed),
//! and the others go on deciding on the first.

use crate::support;

use spillway_server::config::PerSecond;
use spillway_testkit::redis::RedisServer;
use support::{Backing, Server};

const POLICY: &str = "\
domain: ps
descriptors:
  - key: burst
    rate_limit: { unit: second, requests_per_unit: 2 }
  - key: hourly
    rate_limit: { unit: hour, requests_per_unit: 3 }
";

/// Every key on `redis` (a test server of this file's own).
fn keys(redis: &RedisServer) -> Vec<String> {
    redis
        .cli(&["--scan", "--pattern", "*"])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn code(answer: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse) -> i32 {
    answer.overall_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_second_rules_decide_on_their_own_redis_and_fail_alone() {
    let _turn = crate::turn().await;
    let main = RedisServer::start();
    let mut second = RedisServer::start();
    let s = Server::start_with(
        "per-second",
        &[("ps.yaml", POLICY)],
        Backing::Redis(main.url()),
        |c| {
            c.store.per_second = Some(PerSecond {
                url: second.url(),
                ..PerSecond::default()
            });
            c.store.on_error = spillway_policy::OnStoreError::Open;
            c.store.breaker_failures = 1;
        },
    )
    .await;
    let main_errors_before = crate::sum(
        &s.get_text("/metrics").await,
        r#"spillway_store_errors_total{store="main""#,
    );
    const OK: i32 = 1;
    const OVER: i32 = 2;

    // Both kinds in one request and alone: each decided on its own store.
    let both = support::request("ps", &[&[("burst", "u")], &[("hourly", "u")]]);
    assert_eq!(code(&s.ask(both.clone()).await), OK);
    assert_eq!(code(&s.should("ps", &[("burst", "u")]).await), OK);
    assert_eq!(
        code(&s.should("ps", &[("burst", "u")]).await),
        OVER,
        "2 a second"
    );

    // `/v1/config` says which store each rule decides on.
    let config: serde_json::Value = serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
    assert_eq!(
        config["stores"],
        serde_json::json!([{ "name": "main", "kind": "redis" }, { "name": "per_second", "kind": "redis" }])
    );
    let rules = config["domains"][0]["rules"].as_array().unwrap();
    let store_of = |path: &str| {
        rules
            .iter()
            .find(|r| r["path"] == path)
            .map(|r| r["store"].clone())
    };
    assert_eq!(store_of("burst"), Some("per_second".into()), "{rules:?}");
    assert_eq!(store_of("hourly"), Some("main".into()), "{rules:?}");

    let (on_main, on_second) = (keys(&main), keys(&second));
    assert!(
        !on_main.is_empty() && !on_second.is_empty(),
        "{on_main:?} {on_second:?}"
    );
    assert!(on_main.iter().all(|k| k.contains("hourly")), "{on_main:?}");
    assert!(
        on_second.iter().all(|k| k.contains("burst")),
        "{on_second:?}"
    );

    // The per-second Redis gone: its rules follow their policy (open: admitted, past
    // their limit too); the hourly rule still decides on the main one, to its limit.
    second.kill();
    for _ in 0..3 {
        assert_eq!(code(&s.should("ps", &[("burst", "u")]).await), OK, "open");
    }
    assert_eq!(code(&s.ask(both.clone()).await), OK, "hourly: 2 of 3");
    assert_eq!(
        code(&s.should("ps", &[("hourly", "u")]).await),
        OK,
        "hourly: 3 of 3"
    );
    assert_eq!(
        code(&s.should("ps", &[("hourly", "u")]).await),
        OVER,
        "the main store still decides"
    );
    let metrics = s.get_text("/metrics").await;
    assert!(
        metrics.contains(r#"spillway_breaker_state{store="per_second"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"spillway_breaker_state{store="main"} 0"#),
        "{metrics}"
    );
    // The main store failed no call (its errors are the process's: counted from before).
    let main_errors = r#"spillway_store_errors_total{store="main""#;
    assert!(
        metrics.contains(r#"spillway_store_errors_total{store="per_second""#)
            && crate::sum(&metrics, main_errors) == main_errors_before,
        "{metrics}"
    );
    // `/v1/config` and /readyz know of it; /healthcheck stays 200 (the process serves).
    let ready = s.http.get(s.check_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let health = s
        .http
        .get(s.check_url("/healthcheck"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}
