//! Metered budgets through the service, over real sockets, on memory and Redis: Envoy's
//! two calls for one request (a look with `hits_addend: 0` on the request path, the
//! usage from the response when the stream is done) against a `metered` rule, and
//! `/v1/check`'s `usage: true`.

use crate::support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::json;
use support::{Server, backings, descriptor};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

mod replicas;

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

/// A tenant's and one of its users' descriptors in one request, each with its own hits,
/// as Envoy sends them.
fn budgets(user: &str, hits: u64) -> RateLimitRequest {
    let mut tenant = descriptor(&[("tenant", "t1")]);
    tenant.hits_addend = Some(UInt64Value { value: hits });
    let mut per_user = descriptor(&[("tenant", "t1"), ("user", user)]);
    per_user.hits_addend = Some(UInt64Value { value: hits });
    RateLimitRequest {
        domain: "ai".into(),
        descriptors: vec![tenant, per_user],
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

/// A usage's own answer over gRPC (Envoy's stream-done call, which Envoy ignores):
/// OK while the budget is not in debt after the charge, OVER_LIMIT once it is, and
/// OVER_LIMIT for each usage charged while in debt, though every one is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_answers_over_limit_on_grpc_while_the_budget_is_in_debt() {
    for backing in backings() {
        let s = Server::start("metering-answer", &[("ai.yaml", POLICY)], backing.clone()).await;
        let answers: Vec<i32> = {
            let mut codes = Vec::new();
            for hits in [600, 300, 200, 50] {
                codes.push(s.ask(call("tenant", hits)).await.overall_code);
            }
            codes
        };
        let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
        // 600 and 300 leave 100; 200 goes 100 into debt; 50 more, deeper.
        assert_eq!(answers, [ok, ok, over, over], "{backing:?}");
        // Every one was charged: 1,150 of 1,000, 150 in debt, paid back in 9 s.
        s.advance(Duration::from_secs(8));
        assert_eq!(
            s.ask(call("tenant", 0)).await.overall_code,
            over,
            "{backing:?}"
        );
        s.advance(Duration::from_millis(1100));
        assert_eq!(
            s.ask(call("tenant", 0)).await.overall_code,
            ok,
            "{backing:?}"
        );
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
        // And exactly then: refused 1 ms before it, admitted at it.
        let wait = answer["descriptors"][0]["retry_after_ms"].as_u64().unwrap();
        assert_eq!(wait, 240_000, "{backing:?}: {answer}");
        s.advance(Duration::from_millis(wait - 1));
        let (status, _, answer) = s.check(body(0, false)).await;
        assert_eq!(status, 429, "{backing:?}: 1 ms early: {answer}");
        s.advance(Duration::from_millis(1));
        let (status, _, answer) = s.check(body(0, false)).await;
        assert_eq!(status, 200, "{backing:?}: paid back: {answer}");
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

/// Several budgets at once, as an AI gateway sets them: 6,000 tokens a minute and
/// 20,000 a month per tenant, 5,000 a day per user, every one metered. A request is
/// looked at against all three (all or nothing), and its usage charged to all three.
/// The user's day runs out first; another user of the same tenant goes on until the
/// tenant's minute does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_budgets_are_looked_at_together_and_all_charged() {
    const BUDGETS: &str = "
domain: ai
descriptors:
  - key: tenant
    limits:
      - { name: tenant-minute, algorithm: token_bucket, limit: 6000, window: 1m, metered: true }
      - { name: tenant-month, algorithm: fixed_window, limit: 20000, period: month, time_zone: Europe/Berlin, metered: true }
    descriptors:
      - key: user
        limits:
          - { name: user-day, algorithm: fixed_window, limit: 5000, period: day, time_zone: Europe/Berlin, metered: true }
";
    for backing in backings() {
        let s = Server::start("metering-budgets", &[("ai.yaml", BUDGETS)], backing.clone()).await;
        let mut served = Vec::new();
        for user in ["alice", "alice", "alice", "bob", "bob", "bob"] {
            let look = s.ask(budgets(user, 0)).await;
            let ok = look.overall_code == Code::Ok as i32;
            served.push((user, ok));
            if ok {
                s.ask(budgets(user, 2_400)).await;
            }
        }
        // alice: 2,400, then 4,800 of her 5,000 a day; her third look is still admitted
        // (not in debt) and her third response takes her day to 7,200: in debt. The
        // tenant's minute (6,000) went into debt with that same response (7,200), so bob
        // is refused too, though his own day is untouched.
        assert_eq!(
            served,
            [
                ("alice", true),
                ("alice", true),
                ("alice", true),
                ("bob", false),
                ("bob", false),
                ("bob", false)
            ],
            "{backing:?}"
        );
        // The minute pays its debt back (1,200 at 100 a second: 12 s); the month holds
        // 12,800 of 20,000 and bob's day is whole: bob is admitted, alice is not (her
        // day is in debt until Berlin's midnight).
        s.advance(Duration::from_secs(30));
        assert_eq!(
            s.ask(budgets("bob", 0)).await.overall_code,
            Code::Ok as i32,
            "{backing:?}"
        );
        let alice = s.ask(budgets("alice", 0)).await;
        assert_eq!(alice.overall_code, Code::OverLimit as i32, "{backing:?}");
        assert_eq!(
            alice.statuses[0].code,
            Code::Ok as i32,
            "the tenant's budgets have room"
        );
        assert_eq!(
            alice.statuses[1].code,
            Code::OverLimit as i32,
            "alice's day is spent"
        );
    }
}

/// Usage when the store fails, per the rule's `on_store_error`, as docs/metering.md says:
/// `local` charges it to the in-process fallback (which then refuses, in debt), `open`
/// answers OK and the usage is lost, `closed` answers UNAVAILABLE (503) and it is lost.
/// Redis is stopped (SIGSTOP) mid-budget; the breaker opens on the first failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_when_the_store_fails_follows_the_rules_policy() {
    use spillway_policy::OnStoreError;
    use spillway_testkit::redis::RedisServer;

    let usage = |cost: u64| {
        json!({ "domain": "ai", "cost": cost, "usage": true,
                "descriptors": [{ "entries": [{ "key": "tenant", "value": "t1" }] }] })
    };
    let look = json!({ "domain": "ai", "cost": 0,
                       "descriptors": [{ "entries": [{ "key": "tenant", "value": "t1" }] }] });
    for policy in [
        OnStoreError::Local,
        OnStoreError::Open,
        OnStoreError::Closed,
    ] {
        let redis = RedisServer::start();
        let s = Server::start_with(
            "metering-outage",
            &[("ai.yaml", POLICY)],
            support::Backing::Redis(redis.url()),
            |st| {
                st.store.on_error = policy;
                st.store.timeout = Duration::from_millis(300);
                st.store.breaker_failures = 1;
                st.store.breaker_cooldown = Duration::from_secs(60);
            },
        )
        .await;
        let (status, _, _) = s.check(usage(400)).await;
        assert_eq!(status, 200, "{policy:?}: charged on Redis");
        redis.signal("STOP");
        let (status, _, body) = s.check(usage(1500)).await;
        let degraded = &body["descriptors"][0]["degraded"];
        match policy {
            // Charged to the fallback in full: in debt there, and the next look refused.
            OnStoreError::Local => {
                assert_eq!((status, degraded), (429, &json!(true)), "{body}");
                let (status, _, body) = s.check(look.clone()).await;
                assert_eq!(status, 429, "local: in debt: {body}");
            }
            // Lost: answered OK, and looks go on being admitted while the store is down.
            OnStoreError::Open => {
                assert_eq!((status, degraded), (200, &json!(true)), "{body}");
                assert_eq!(s.check(look.clone()).await.0, 200);
            }
            OnStoreError::Closed => {
                assert_eq!(status, 503, "{body}");
                assert_eq!(body["error"]["kind"], "store_unavailable");
                // Over gRPC, Envoy's stream-done usage on the metered rule: UNAVAILABLE.
                let answer = s.ask_status(call("tenant", 600)).await;
                let status = answer.expect_err("no answer without the store");
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            }
        }
        redis.signal("CONT");
        s.running.stop().await;
    }
}
