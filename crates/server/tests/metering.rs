//! Metered budgets through the service, over real sockets, on memory and Redis: Envoy's
//! two calls for one request (a look with `hits_addend: 0` on the request path, the
//! usage from the response when the stream is done) against a `metered` rule, and
//! `/v1/check`'s `usage: true`.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::json;
use support::{Server, backings, descriptor};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// The budget twice: 1,000 tokens a minute per tenant, metered, and the same
/// without `metered` (a usage past what remains is then a request denied, charged
/// nothing: the budget leaks).
const POLICY: &str = "
domain: ai
descriptors:
  - key: tenant
    limits:
      - { name: tokens, algorithm: token_bucket, limit: 1000, window: 1m, metered: true }
  - key: unmetered
    limits:
      - { name: tokens, algorithm: token_bucket, limit: 1000, window: 1m }
";

/// `ShouldRateLimit` for one descriptor with its own `hits_addend`, as Envoy sends a
/// route's rate limit with `hits_addend` set (0 on the request path, the usage on
/// stream done).
fn call(key: &str, hits: u64) -> RateLimitRequest {
    let mut d = descriptor(&[(key, "t1")]);
    d.hits_addend = Some(UInt64Value { value: hits });
    RateLimitRequest {
        domain: "ai".into(),
        descriptors: vec![d],
        hits_addend: 0,
    }
}

/// Four requests, each checked with a look and charged 600 tokens when its response
/// is done: the second response drives the budget into debt and the third request is
/// refused. Without `metered`, each 600 past what remains is refused and charges
/// nothing, so every request is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_stream_done_usage_drives_a_metered_budget_into_debt() {
    for backing in backings() {
        let s = Server::start("metering-envoy", &[("ai.yaml", POLICY)], backing.clone()).await;
        for (key, want) in [
            ("tenant", [true, true, false, false]),
            ("unmetered", [true, true, true, true]),
        ] {
            let mut admitted = Vec::new();
            for _ in 0..4 {
                let look = s.ask(call(key, 0)).await;
                let ok = look.overall_code == Code::Ok as i32;
                admitted.push(ok);
                if ok {
                    // Stream done: Envoy ignores this answer.
                    s.ask(call(key, 600)).await;
                }
                s.advance(Duration::from_millis(10));
            }
            assert_eq!(admitted, want, "{backing:?} {key}");
        }
        // In debt by 200 tokens (1,200 charged, ~0 refilled): paid back at 1,000 a
        // minute, in about 12 s, then admitted again.
        s.advance(Duration::from_secs(13));
        let look = s.ask(call("tenant", 0)).await;
        assert_eq!(look.overall_code, Code::Ok as i32, "{backing:?}: paid back");
    }
}

/// `/v1/check` with `usage: true` charges any rule in full: 5,000 tokens against 1,000
/// answer 429 (in debt) and the next look is refused with the time it takes to pay back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_check_charges_usage_in_full() {
    for backing in backings() {
        let s = Server::start("metering-v1", &[("ai.yaml", POLICY)], backing.clone()).await;
        let body = |cost: u64, usage: bool| {
            json!({
                "domain": "ai",
                "cost": cost,
                "usage": usage,
                "descriptors": [{ "entries": [{ "key": "unmetered", "value": "t9" }] }]
            })
        };
        let (status, _, answer) = s.check(body(5000, true)).await;
        assert_eq!(status, 429, "{backing:?}: {answer}");
        let (status, headers, answer) = s.check(body(0, false)).await;
        assert_eq!(status, 429, "{backing:?}: {answer}");
        // 4,000 owed at 1,000 a minute: four minutes.
        let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(
            (239..=240).contains(&retry),
            "{backing:?}: retry-after {retry}"
        );
        // The same without `usage`: a cost past the capacity is refused, charged nothing.
        let other = json!({
            "domain": "ai", "cost": 5000,
            "descriptors": [{ "entries": [{ "key": "unmetered", "value": "t10" }] }]
        });
        let (status, _, _) = s.check(other).await;
        assert_eq!(status, 429);
        let look = json!({
            "domain": "ai", "cost": 0,
            "descriptors": [{ "entries": [{ "key": "unmetered", "value": "t10" }] }]
        });
        let (status, _, _) = s.check(look).await;
        assert_eq!(status, 200, "{backing:?}: nothing was charged");
    }
}
