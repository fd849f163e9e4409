//! `/metrics`: decisions by domain, rule (and limit, among a node's several) and outcome
//! (shadow and near-limit included),
//! and no label made of request values. (Store latency and errors: `failure.rs`.) (The recorder is
//! process-wide: `recorder/main.rs`.)

use crate::support;

use serde_json::json;
use support::{Backing, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_counted_by_domain_rule_and_outcome() {
    let _turn = crate::turn().await;
    let yaml = "
domain: m
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: trial
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: plan
    limits:
      - { name: burst, limit: 3, window: 1h }
      - { limit: 100, window: 1d }
";
    let s = Server::start("metrics", &[("m.yaml", yaml)], Backing::Memory).await;
    // Counts by API are the process's: read as differences.
    let before = s.get_text("/metrics").await;
    let since =
        |text: &str, series: &str| crate::value(text, series) - crate::value(&before, series);
    for i in 0..6 {
        // Distinct users for the first, one user for the rest: labels must not differ.
        let user = if i == 0 {
            "first".to_string()
        } else {
            "u".to_string()
        };
        s.check(json!({ "domain": "m", "descriptors": [
            { "entries": [{ "key": "user", "value": user }] },
            { "entries": [{ "key": "trial", "value": "t" }] },
            { "entries": [{ "key": "plan", "value": "p" }] },
        ]}))
        .await;
    }
    let text = s.get_text("/metrics").await;
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "`{line}` in\n{text}");
    has(r#"spillway_decisions_total{domain="m",rule="user",limit="",outcome="ok"} 6"#);
    has(r#"spillway_decisions_total{domain="m",rule="trial",limit="",outcome="ok"} 1"#);
    has(
        r#"spillway_decisions_total{domain="m",rule="trial",limit="",outcome="shadow_over_limit"} 5"#,
    );
    // A node's limits apart: by name, or by position. All or nothing: the burst's denials
    // are the hour's too.
    has(r##"spillway_decisions_total{domain="m",rule="plan",limit="#burst",outcome="ok"} 3"##);
    has(
        r##"spillway_decisions_total{domain="m",rule="plan",limit="#burst",outcome="over_limit"} 3"##,
    );
    has(r##"spillway_decisions_total{domain="m",rule="plan",limit="#1",outcome="ok"} 6"##);
    // 5 per minute, near at 80% = 4 used: the fourth and fifth hit of user `u`.
    has(r#"spillway_near_limit_total{domain="m",rule="user",limit=""} 2"#);
    // An outcome a rule never had shows no series (each counter registers on first use).
    assert!(
        !text.contains(r#"rule="user",limit="",outcome="over_limit""#),
        "{text}"
    );
    assert_eq!(since(&text, r#"spillway_requests_total{api="http"}"#), 6);
    has(r#"spillway_breaker_state{store="main"} 0"#);
    assert!(!text.contains("first"), "a request value became a label");

    // A body refused before any handler (over 64 KiB: 413) is still a request to its
    // API, and an invalid one.
    for path in ["/v1/check", "/json"] {
        let r = s
            .http
            .post(s.url(path))
            .body(vec![b' '; 65 * 1024])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 413, "{path}");
    }
    let text = s.get_text("/metrics").await;
    for (series, want) in [
        (r#"spillway_requests_total{api="http"}"#, 7),
        (r#"spillway_invalid_requests_total{api="http"}"#, 1),
        (r#"spillway_requests_total{api="json"}"#, 1),
        (r#"spillway_invalid_requests_total{api="json"}"#, 1),
    ] {
        assert_eq!(since(&text, series), want, "{series} in\n{text}");
    }
    s.running.stop().await;
}

/// A concurrency rule: takes are decisions (admitted or over the limit), releases are
/// counted apart and decide nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_taken_are_decisions_and_releases_are_counted_apart() {
    let _turn = crate::turn().await;
    let yaml = "
domain: h
descriptors:
  - key: tenant
    descriptors:
      - key: id
        limits:
          - { name: in-flight, algorithm: concurrency, limit: 1 }
";
    let s = Server::start("metrics-holds", &[("h.yaml", yaml)], Backing::Memory).await;
    let body = |id: &str| {
        json!({ "domain": "h", "descriptors": [{ "entries": [
            { "key": "tenant", "value": "t" }, { "key": "id", "value": id },
        ] }] })
    };
    assert_eq!(s.post("/v1/acquire", &body("a")).await.0, 200);
    assert_eq!(s.post("/v1/acquire", &body("b")).await.0, 429);
    assert_eq!(s.post("/v1/release", &body("a")).await.0, 200);
    assert_eq!(s.post("/v1/release", &body("a")).await.0, 200);
    let text = s.get_text("/metrics").await;
    let has = |line: &str| assert!(text.lines().any(|l| l == line), "`{line}` in\n{text}");
    has(
        r##"spillway_decisions_total{domain="h",rule="tenant.id",limit="#in-flight",outcome="ok"} 1"##,
    );
    has(
        r##"spillway_decisions_total{domain="h",rule="tenant.id",limit="#in-flight",outcome="over_limit"} 1"##,
    );
    has(r##"spillway_holds_released_total{domain="h",rule="tenant.id",limit="#in-flight"} 2"##);
}

/// A concurrency rule's holds in use (per rule, over its keys) and the holds found
/// lapsed, on the memory store and on Redis: the gauge follows takes, releases and the
/// lease; a hold whose lease ran out is counted lapsed when a later take clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_in_use_and_lapsed_holds_are_counted() {
    let _turn = crate::turn().await;
    for (domain, backing) in [
        ("inuse-memory", Backing::Memory),
        (
            "inuse-redis",
            Backing::Redis(spillway_testkit::redis::standalone_url()),
        ),
    ] {
        let yaml = format!(
            "
domain: {domain}
descriptors:
  - key: tenant
    descriptors:
      - key: id
        limits:
          - {{ name: in-flight, algorithm: concurrency, limit: 2, window: 10s }}
"
        );
        let s = Server::start("metrics-in-use", &[("h.yaml", &yaml)], backing).await;
        let body = |tenant: &str, id: &str| {
            json!({ "domain": domain, "descriptors": [{ "entries": [
                { "key": "tenant", "value": tenant }, { "key": "id", "value": id },
            ] }] })
        };
        let labels = format!(r##"{{domain="{domain}",rule="tenant.id",limit="#in-flight"}}"##);
        let read = async |name: &str| {
            let text = s.get_text("/metrics").await;
            crate::value(&text, &format!("{name}{labels}"))
        };
        assert_eq!(s.post("/v1/acquire", &body("t", "a")).await.0, 200);
        assert_eq!(s.post("/v1/acquire", &body("t", "b")).await.0, 200);
        assert_eq!(s.post("/v1/acquire", &body("u", "c")).await.0, 200);
        assert_eq!(read("spillway_holds_in_use").await, 3, "{domain}");
        // Renewing a held id takes no slot more; a second take of it would (t is full).
        assert_eq!(s.post("/v1/renew", &body("t", "b")).await.0, 200);
        assert_eq!(s.post("/v1/acquire", &body("t", "b")).await.0, 429);
        assert_eq!(s.post("/v1/release", &body("t", "a")).await.0, 200);
        assert_eq!(read("spillway_holds_in_use").await, 2, "{domain}");
        assert_eq!(read("spillway_holds_lapsed_total").await, 0, "{domain}");

        // Past the lease: b and c lapse, never given back.
        s.clock.advance(std::time::Duration::from_secs(11));
        assert_eq!(read("spillway_holds_in_use").await, 0, "{domain}");
        assert_eq!(s.post("/v1/acquire", &body("t", "d")).await.0, 200);
        assert_eq!(read("spillway_holds_lapsed_total").await, 1, "{domain}");
        assert_eq!(read("spillway_holds_in_use").await, 1, "{domain}");
        // A release of a lapsed hold clears it on its key (u's c).
        assert_eq!(s.post("/v1/release", &body("u", "c")).await.0, 200);
        assert_eq!(read("spillway_holds_lapsed_total").await, 2, "{domain}");
        assert_eq!(read("spillway_holds_in_use").await, 1, "{domain}");
        s.running.stop().await;
    }
}
