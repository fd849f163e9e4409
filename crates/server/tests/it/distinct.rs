//! `algorithm: distinct` in a policy: "at most 3 distinct IPs per API key per hour",
//! over `/v1/check` and `ShouldRateLimit`, on memory and Redis.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::{Server, backings};

const POLICY: &str = "
domain: api
descriptors:
  - key: api_key
    descriptors:
      - key: ip
        limits:
          - { name: ips, algorithm: distinct, limit: 3, window: 1h }
          - { name: per-ip, algorithm: fixed_window, limit: 2, window: 1h }
";

fn request(key: &str, ip: &str) -> serde_json::Value {
    json!({ "domain": "api", "descriptors": [{ "entries": [
        { "key": "api_key", "value": key },
        { "key": "ip", "value": ip },
    ] }] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_distinct_ips_per_api_key_per_hour() {
    for backing in backings() {
        let s = Server::start("distinct", &[("api.yaml", POLICY)], backing.clone()).await;
        for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
            let (status, _, body) = s.check(request("k1", ip)).await;
            assert_eq!(status, 200, "{backing:?} {ip}: {body}");
        }
        s.clock.advance(Duration::from_secs(600));
        let (status, headers, body) = s.check(request("k1", "10.0.0.4")).await;
        assert_eq!(status, 429, "{backing:?}: a fourth IP: {body}");
        assert_eq!(body["denied_by"], json!({ "descriptor": 0, "rule": "ips" }));
        // The window is aligned to the hour: the manual clock starts on one.
        let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=3600).contains(&retry), "retry-after {retry}");

        let (status, _, body) = s.check(request("k1", "10.0.0.2")).await;
        assert_eq!(status, 200, "{backing:?}: an IP already seen: {body}");
        let (status, _, body) = s.check(request("k2", "10.0.0.4")).await;
        assert_eq!(
            status, 200,
            "{backing:?}: another key has its own IPs: {body}"
        );

        // Over gRPC, the same counters.
        let denied = s
            .should("api", &[("api_key", "k1"), ("ip", "10.0.0.5")])
            .await;
        assert_eq!(denied.overall_code, 2, "{backing:?}: OVER_LIMIT");
        let seen = s
            .should("api", &[("api_key", "k1"), ("ip", "10.0.0.1")])
            .await;
        assert_eq!(seen.overall_code, 1, "{backing:?}: OK");
        // And the reference's /json.
        let json_status = |ip: &str| {
            let body = format!(
                r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"api_key","value":"k1"}},{{"key":"ip","value":"{ip}"}}]}}]}}"#
            );
            let r = s.http.post(s.url("/json")).body(body).send();
            async move { r.await.unwrap().status().as_u16() }
        };
        assert_eq!(
            json_status("10.0.0.6").await,
            429,
            "{backing:?}: /json, a new IP"
        );
        assert_eq!(
            json_status("10.0.0.3").await,
            200,
            "{backing:?}: /json, a known IP"
        );

        // The node's other rule still counts per IP (its key keeps the value).
        let (status, _, body) = s.check(request("k2", "10.0.0.4")).await;
        assert_eq!(status, 200, "{backing:?}: {body}");
        let (status, _, body) = s.check(request("k2", "10.0.0.4")).await;
        assert_eq!(status, 429, "{backing:?}: {body}");
        assert_eq!(
            body["denied_by"],
            json!({ "descriptor": 0, "rule": "per-ip" })
        );
        s.running.stop().await;
    }
}

/// A member of any length is decided, not refused (a refused call is one Envoy
/// under `failure_mode_deny: false` admits): kept as its digest, two long members that
/// differ only in their last byte are two members, and the same one counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_member_is_decided_and_counted_apart() {
    for backing in backings() {
        let s = Server::start("distinct-long", &[("api.yaml", POLICY)], backing.clone()).await;
        let long = |last: char| format!("{}{last}", "x".repeat(2_000));
        let mut answers = Vec::new();
        for last in ['a', 'a', 'a', 'b', 'c', 'd'] {
            let (status, _, body) = s.check(request("k1", &long(last))).await;
            answers.push((last, status, body["denied_by"]["rule"].clone()));
        }
        // `a` three times: per-ip's 2 an hour (one key, its value digested); b and c
        // are the second and third IPs; d, differing only in its last byte, a fourth.
        assert_eq!(
            answers,
            [
                ('a', 200, json!(null)),
                ('a', 200, json!(null)),
                ('a', 429, json!("per-ip")),
                ('b', 200, json!(null)),
                ('c', 200, json!(null)),
                ('d', 429, json!("ips")),
            ],
            "{backing:?}"
        );
        s.running.stop().await;
    }
}

/// Usage on a `distinct` rule is refused, as the library refuses it: a value is counted
/// once, whatever it cost, so "charge 500 used" has nothing to count. It used to be
/// decided as an ordinary check (the member counted, the usage dropped). The refusal
/// is a 400 naming the rule, and nothing is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_on_a_distinct_rule_is_refused() {
    for backing in backings() {
        let s = Server::start("distinct-usage", &[("api.yaml", POLICY)], backing.clone()).await;
        let mut usage = request("k1", "10.0.0.1");
        usage["usage"] = json!(true);
        usage["cost"] = json!(500);
        let (status, _, body) = s.check(usage).await;
        assert_eq!(status, 400, "{backing:?}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("ips") && message.contains("cannot take usage"),
            "{message}"
        );
        // Nothing was counted: three new IPs still fit.
        for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
            let (status, _, body) = s.check(request("k1", ip)).await;
            assert_eq!(status, 200, "{backing:?} {ip}: {body}");
        }
        s.running.stop().await;
    }
}
