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
    assert!(
        error.contains("token_bucket, gcra, shares and concurrency"),
        "{error}"
    );
    let status = s.rewrite("w.yaml", &POLICY.replace("300ms", "soon")).await;
    assert!(status.error.expect("refused").contains("max_wait"));
    // The rule in force still waits.
    s.check(body("c", false)).await;
    assert_eq!(s.check(body("c", false)).await.2["wait_ms"], 100);
}

/// At most `max_waiters` answers are held for their waits: with one held, a request that
/// would wait is refused (429 / OVER_LIMIT) with its wait as `retry_after`, and counted;
/// a `/v1/check` that asks nothing held is still told its wait. On the memory store (the
/// bound is the server's, whatever the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_waiters_a_request_that_would_wait_is_refused() {
    // One a minute: a held answer is held far longer than the steps that follow take.
    let policy = "domain: w
descriptors:
  - key: user
    limits:
      - { name: slow, algorithm: gcra, limit: 1, window: 1m, burst: 1, max_wait: 10m }
";
    let s = Server::start_with("waits-bound", &[("w.yaml", policy)], Backing::Memory, |c| {
        c.service.max_waiters = 1;
    })
    .await;
    assert_eq!(
        s.check(body("x", true)).await.0,
        200,
        "the first goes at once"
    );
    // Two that would wait, at once: one is held, the other refused as soon as it is
    // decided (whichever comes second).
    let mut a = std::pin::pin!(s.check(body("x", true)));
    let mut b = std::pin::pin!(s.check(body("x", true)));
    let first = async {
        tokio::select! {
            r = &mut a => r,
            r = &mut b => r,
        }
    };
    // Both held (no bound) would answer in a minute: a failure, not a hang.
    let (status, _, refused) = tokio::time::timeout(Duration::from_secs(30), first)
        .await
        .expect("neither refused: both answers held");
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["wait_ms"], 0, "{refused}");
    let retry = refused["descriptors"][0]["retry_after_ms"].as_u64();
    assert!(
        matches!(retry, Some(60_000 | 120_000)),
        "told to retry after its wait: {refused}"
    );
    // While one is held: gRPC, whose OK would be held too, is refused.
    let grpc = s.should("w", &[("user", "x")]).await;
    assert_eq!(grpc.overall_code, Code::OverLimit as i32);
    // Told, not held: the caller waits on its own, so the bound does not apply.
    let (status, _, told) = s.check(body("x", false)).await;
    assert_eq!(status, 200, "{told}");
    assert_eq!(told["wait_ms"], 240_000, "{told}");
    let metrics = s.get_text("/metrics").await;
    for line in [
        "spillway_waits_refused_total{api=\"http\"} 1",
        "spillway_waits_refused_total{api=\"grpc\"} 1",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
}
