//! Waiting instead of a 429 (a rule's `max_wait`): a request the rule admits after a
//! wait is told it on `/v1/check` (`wait_ms`), waited out by the server when it asks
//! (`"wait": true`), and held for it on `ShouldRateLimit`; its slot is reserved at once,
//! so the queue goes ahead in order and past `max_wait` the request is refused. On the
//! memory store and on Redis.

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use serde_json::json;
use spillway_core::{Clock, SystemClock};

use crate::support::{self, Backing, Server};

const POLICY: &str = "domain: w
descriptors:
  - key: user
    limits:
      - { name: paced, algorithm: gcra, limit: 10, window: 1s, burst: 1, max_wait: 300ms }
";

fn body(user: &str, wait: bool) -> serde_json::Value {
    json!({ "domain": "w", "wait": wait,
            "descriptors": [{ "entries": [{ "key": "user", "value": user }] }] })
}

/// Four requests at once go ahead at 0, 100, 200 and 300 ms (the answer says when);
/// the fifth would go at 400 ms, past `max_wait`: 429, retry after the 100 ms that
/// bring it within the wait.
#[tokio::test]
async fn check_says_each_requests_wait_and_refuses_past_max_wait() {
    for backing in support::backings() {
        let s = Server::start("waits-check", &[("w.yaml", POLICY)], backing.clone()).await;
        let mut waits = Vec::new();
        for _ in 0..4 {
            let (status, _, answer) = s.check(body("a", false)).await;
            assert_eq!(status, 200, "{backing:?}: {answer}");
            assert_eq!(answer["waited"], false);
            assert_eq!(answer["descriptors"][0]["wait_ms"], answer["wait_ms"]);
            waits.push(answer["wait_ms"].as_u64().unwrap());
        }
        assert_eq!(waits, [0, 100, 200, 300], "{backing:?}");
        let (status, _, answer) = s.check(body("a", false)).await;
        assert_eq!(status, 429, "{backing:?}: {answer}");
        assert_eq!(answer["wait_ms"], 0);
        assert_eq!(answer["descriptors"][0]["retry_after_ms"], 100);
        // What the rule is: its wait in the configuration's view.
        let config: serde_json::Value =
            serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
        let rule = &config["domains"][0]["rules"][0];
        assert_eq!(rule["max_wait_ms"], 300, "{config}");
    }
}

/// Asked to, the server waits before answering (at least the wait it states, whatever
/// the machine's load adds); `ShouldRateLimit` and `/json` hold their OK for the wait.
/// Real time: only lower bounds are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_waits_when_asked_and_holds_a_grpc_ok_for_the_wait() {
    for backing in support::backings() {
        let s = Server::start("waits-held", &[("w.yaml", POLICY)], backing.clone()).await;
        assert_eq!(s.check(body("b", true)).await.2["wait_ms"], 0);
        let started = SystemClock.now();
        let (status, _, answer) = s.check(body("b", true)).await;
        let took = SystemClock.now().duration_since(started);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["waited"], true);
        assert_eq!(answer["wait_ms"], 100);
        assert!(
            took >= Duration::from_millis(100),
            "{backing:?}: answered in {took:?}"
        );

        let started = SystemClock.now();
        let answer = s.should("w", &[("user", "b")]).await;
        let took = SystemClock.now().duration_since(started);
        assert_eq!(answer.overall_code, Code::Ok as i32);
        assert!(
            took >= Duration::from_millis(200),
            "{backing:?}: held {took:?}"
        );
        // The reference's `/json` has no field for a wait either: its OK is held too.
        let started = SystemClock.now();
        let json = json!({ "domain": "w", "descriptors": [{ "entries": [{ "key": "user", "value": "b" }] }] });
        let (status, answer) = s.post("/json", &json).await;
        let took = SystemClock.now().duration_since(started);
        assert_eq!(status, 200, "{answer}");
        assert!(
            took >= Duration::from_millis(300),
            "{backing:?}: /json held {took:?}"
        );
        // The queue is full to `max_wait`: over the limit, at once.
        let refused = s.should("w", &[("user", "b")]).await;
        assert_eq!(refused.overall_code, Code::OverLimit as i32, "{backing:?}");
    }
}

/// `max_wait` where it cannot apply is refused with the field named, and the rules in
/// force are kept.
#[tokio::test]
async fn max_wait_on_an_algorithm_that_cannot_wait_is_refused() {
    let s = Server::start("waits-bad", &[("w.yaml", POLICY)], Backing::Memory).await;
    let bad = "domain: w
descriptors:
  - key: user
    limits:
      - { name: windowed, algorithm: fixed_window, limit: 10, window: 1s, max_wait: 300ms }
";
    let status = s.rewrite("w.yaml", bad).await;
    let error = status.error.expect("refused");
    assert!(error.contains("max_wait"), "{error}");
    assert!(error.contains("token_bucket, gcra and shares"), "{error}");
    let status = s.rewrite("w.yaml", &POLICY.replace("300ms", "soon")).await;
    assert!(status.error.expect("refused").contains("max_wait"));
    // The rule in force still waits.
    s.check(body("c", false)).await;
    assert_eq!(s.check(body("c", false)).await.2["wait_ms"], 100);
}
