//! Reservations through the service, over real sockets, on memory and Redis:
//! `/v1/reserve` charges an estimate if it fits, `/v1/commit` settles it with what the
//! work used (the rest given back, the excess charged into debt); a reservation is
//! committed once; one left uncommitted past its TTL keeps its estimate charged; on
//! Redis it survives a restart of Spillway, lives in its charge's slot on Cluster, and
//! lands with its charge or not at all; a commit while the breaker is open keeps it.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};

use support::{Backing, Server, backings};

mod on_redis;

/// 10,000 tokens a month per tenant (a fixed window on the calendar), and a sliding log
/// that cannot give back.
const POLICY: &str = "
domain: ai
descriptors:
  - key: tenant
    limits:
      - { name: month, algorithm: fixed_window, limit: 10000, period: month }
  - key: logged
    limits:
      - { name: log, algorithm: sliding_log, limit: 100, window: 1m }
  - key: windowed
    limits:
      - { name: window, algorithm: sliding_window, limit: 100, window: 1m }
  - key: counted
    limits:
      - { name: ips, algorithm: distinct, limit: 3, window: 1h }
  - key: metered
    limits:
      - { name: tokens, algorithm: token_bucket, limit: 1000, window: 1000h, metered: true }
";

fn reserve(tenant: &str, estimate: u64) -> Value {
    reserve_on("tenant", tenant, estimate)
}

/// `/v1/reserve`'s (and `/v1/check`'s) body: `estimate` on `key=tenant`.
fn reserve_on(key: &str, tenant: &str, estimate: u64) -> Value {
    json!({
        "domain": "ai",
        "cost": estimate,
        "descriptors": [{ "entries": [{ "key": key, "value": tenant }] }]
    })
}

fn commit(id: &str, used: u64) -> Value {
    json!({ "reservation": id, "used": used })
}

/// What is left of the tenant's month, by a look.
async fn remaining(s: &Server, tenant: &str) -> u64 {
    let (_, _, answer) = s.check(reserve(tenant, 0)).await;
    answer["descriptors"][0]["remaining"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_is_settled_once_with_what_the_work_used() {
    for backing in backings() {
        let s = Server::start("reserve", &[("ai.yaml", POLICY)], backing.clone()).await;
        // 3,000 estimated, 1,200 used: 1,800 given back.
        let (status, answer) = s.post("/v1/reserve", &reserve("t1", 3000)).await;
        assert_eq!(status, 200, "{backing:?}: {answer}");
        let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
        assert_eq!(answer["reservation"]["ttl_ms"], 300_000);
        assert_eq!(
            remaining(&s, "t1").await,
            7000,
            "{backing:?}: the estimate holds"
        );
        let (status, answer) = s.post("/v1/commit", &commit(&id, 1200)).await;
        assert_eq!(status, 200, "{backing:?}: {answer}");
        assert_eq!(answer["settled"], json!({ "estimate": 3000, "used": 1200 }));
        assert_eq!(remaining(&s, "t1").await, 8800, "{backing:?}");
        // Once only.
        let (status, answer) = s.post("/v1/commit", &commit(&id, 0)).await;
        assert_eq!(status, 404, "{backing:?}: {answer}");
        assert_eq!(answer["error"]["kind"], "no_reservation");
        // 8,000 estimated, 12,000 used: 4,000 past the estimate, into debt; the commit
        // answers 200 (it landed), saying the budget is in debt.
        let (_, answer) = s.post("/v1/reserve", &reserve("t1", 8000)).await;
        let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
        let (status, answer) = s.post("/v1/commit", &commit(&id, 12_000)).await;
        assert_eq!(status, 200, "{backing:?}: {answer}");
        assert_eq!(answer["allowed"], false, "{backing:?}: {answer}");
        // In debt, a reservation of 1 is refused, and nothing is reserved.
        let (status, answer) = s.post("/v1/reserve", &reserve("t1", 1)).await;
        assert_eq!(status, 429, "{backing:?}: {answer}");
        assert!(answer.get("reservation").is_none(), "{answer}");
        // Released in full (used 0): the estimate comes back.
        let (_, answer) = s.post("/v1/reserve", &reserve("t2", 10_000)).await;
        let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
        assert_eq!(remaining(&s, "t2").await, 0);
        s.post("/v1/commit", &commit(&id, 0)).await;
        assert_eq!(remaining(&s, "t2").await, 10_000, "{backing:?}: released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_reservation_cannot_be_is_refused_with_why() {
    let s = Server::start("reserve-bad", &[("ai.yaml", POLICY)], Backing::Memory).await;
    let on = |key: &str| reserve_on(key, "x", 5);
    let bad = [
        (on("logged"), "cannot take a reservation"),
        (on("windowed"), "cannot take a reservation"),
        (on("counted"), "cannot take a reservation"),
        (
            json!({ "domain": "ai", "cost": 5, "descriptors": [{
                "entries": [{ "key": "tenant", "value": "t" }], "cost": 7 }] }),
            "the request's cost, for every descriptor",
        ),
        (reserve("t1", 0), "at least 1"),
        (
            json!({ "domain": "ai", "cost": 5, "usage": true,
                    "descriptors": [{ "entries": [{ "key": "tenant", "value": "t" }] }] }),
            "not usage",
        ),
        (
            json!({ "domain": "ai", "cost": 5, "ttl_ms": 0,
                    "descriptors": [{ "entries": [{ "key": "tenant", "value": "t" }] }] }),
            "ttl_ms",
        ),
        (
            json!({ "domain": "ai", "cost": 5, "ttl_ms": null,
                    "descriptors": [{ "entries": [{ "key": "tenant", "value": "t" }] }] }),
            "ttl_ms",
        ),
        // No limit to reserve on: a domain with no rules, descriptors no rule matches.
        (
            json!({ "domain": "nowhere", "cost": 5,
                    "descriptors": [{ "entries": [{ "key": "tenant", "value": "t" }] }] }),
            "no limit to reserve on",
        ),
        (
            json!({ "domain": "ai", "cost": 5,
                    "descriptors": [{ "entries": [{ "key": "unknown", "value": "t" }] }] }),
            "no limit to reserve on",
        ),
    ];
    for (body, says) in bad {
        let (status, answer) = s.post("/v1/reserve", &body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    // ttl_ms belongs to /v1/reserve.
    let (status, _, answer) = s
        .check(json!({ "domain": "ai", "ttl_ms": 5,
                       "descriptors": [{ "entries": [{ "key": "tenant", "value": "t" }] }] }))
        .await;
    assert_eq!(status, 400, "{answer}");
    // An id never made, or not an id.
    for id in ["r0123456789abcdef0123456789abcdef", "../../etc/passwd"] {
        let (status, answer) = s.post("/v1/commit", &commit(id, 1)).await;
        assert_eq!(status, 404, "{answer}");
    }
    assert_eq!(remaining(&s, "t1").await, 10_000, "nothing was charged");
}

/// A reservation not committed within its TTL expires, and its estimate stays charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_reservation_keeps_its_estimate_charged() {
    // Memory: the service's (manual) clock passes the TTL.
    let s = Server::start("reserve-expiry", &[("ai.yaml", POLICY)], Backing::Memory).await;
    let body = json!({ "domain": "ai", "cost": 2500, "ttl_ms": 60_000,
                       "descriptors": [{ "entries": [{ "key": "tenant", "value": "t1" }] }] });
    let (_, answer) = s.post("/v1/reserve", &body).await;
    let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
    s.advance(Duration::from_secs(61));
    let (status, answer) = s.post("/v1/commit", &commit(&id, 0)).await;
    assert_eq!(status, 404, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    assert_eq!(
        remaining(&s, "t1").await,
        7500,
        "the estimate stays charged"
    );

    // Redis: the record's own TTL (Redis's clock) ends it; wait for Redis to drop it.
    let url = spillway_testkit::redis::standalone_url();
    let s = Server::start(
        "reserve-expiry",
        &[("ai.yaml", POLICY)],
        Backing::Redis(url.clone()),
    )
    .await;
    let body = json!({ "domain": "ai", "cost": 2500, "ttl_ms": 50,
                       "descriptors": [{ "entries": [{ "key": "tenant", "value": "t1" }] }] });
    let (_, answer) = s.post("/v1/reserve", &body).await;
    let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
    let redis = redis::Client::open(url).unwrap();
    let conn = redis.get_multiplexed_async_connection().await.unwrap();
    let gone = support::eventually(|| {
        let mut conn = conn.clone();
        let pattern = format!("*reservation:{id}");
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(pattern)
                .query_async(&mut conn)
                .await
                .unwrap();
            keys.is_empty()
        }
    })
    .await;
    assert!(gone, "Redis dropped the record after its 50 ms");
    let (status, answer) = s.post("/v1/commit", &commit(&id, 0)).await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(
        remaining(&s, "t1").await,
        7500,
        "the estimate stays charged"
    );
}

/// A descriptor's own limit is refused on `/v1/reserve` even where the HTTP listener
/// takes overrides (`http_limit_overrides: allow`): a reservation is made on the
/// policy's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_override_is_refused_on_reserve() {
    let s = Server::start_with(
        "reserve-override",
        &[("ai.yaml", POLICY)],
        Backing::Memory,
        |c| c.service.http_callers.overrides = "allow".parse().unwrap(),
    )
    .await;
    let body = json!({ "domain": "ai", "cost": 5, "descriptors": [{
        "entries": [{ "key": "tenant", "value": "t" }],
        "limit": { "requests_per_unit": 100000, "unit": "second" } }] });
    let (status, answer) = s.post("/v1/reserve", &body).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("not a limit override"), "{message}");
    assert_eq!(remaining(&s, "t").await, 10_000, "nothing was charged");
}

/// A `metered` rule takes a request's hits as usage (charged in full, admitted while
/// not in debt), but a reservation's estimate is checked like any request: one that
/// does not fit is refused, and reserves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metered_rule_checks_a_reservations_estimate() {
    for backing in backings() {
        let s = Server::start("reserve-metered", &[("ai.yaml", POLICY)], backing.clone()).await;
        let (status, answer) = s
            .post("/v1/reserve", &reserve_on("metered", "m1", 800))
            .await;
        assert_eq!(status, 200, "{backing:?}: {answer}");
        // 200 left: 300 does not fit. As usage (`/v1/check`), the metered rule would
        // have admitted it and gone into debt.
        let (status, answer) = s
            .post("/v1/reserve", &reserve_on("metered", "m1", 300))
            .await;
        assert_eq!(status, 429, "{backing:?}: {answer}");
        assert!(answer.get("reservation").is_none(), "{answer}");
        let (_, _, look) = s.check(reserve_on("metered", "m1", 0)).await;
        assert_eq!(
            look["descriptors"][0]["remaining"], 200,
            "{backing:?}: {look}"
        );
    }
}

/// Two commits of one reservation at once, on every store: exactly one settles (200),
/// the other finds no reservation (404), and the budget is settled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_concurrent_commits_exactly_one_wins() {
    for backing in backings() {
        let s = Server::start("reserve-race", &[("ai.yaml", POLICY)], backing.clone()).await;
        for round in 0..20 {
            let tenant = format!("r{round}");
            let (_, answer) = s.post("/v1/reserve", &reserve(&tenant, 1000)).await;
            let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
            let body = commit(&id, 100);
            let (a, b) = tokio::join!(s.post("/v1/commit", &body), s.post("/v1/commit", &body));
            let mut statuses = [a.0, b.0];
            statuses.sort_unstable();
            assert_eq!(statuses, [200, 404], "{backing:?}: {a:?} {b:?}");
            assert_eq!(
                remaining(&s, &tenant).await,
                9_900,
                "{backing:?}: settled once"
            );
        }
    }
}

/// A reservation committed after its rule changed to one that cannot give back (a
/// sliding log): the commit settles on the rules in force, and the estimate stays
/// charged where the rule cannot give it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_changed_to_one_that_cannot_give_back_keeps_the_estimate() {
    for backing in backings() {
        let s = Server::start("reserve-changed", &[("ai.yaml", POLICY)], backing.clone()).await;
        let (_, answer) = s.post("/v1/reserve", &reserve("t1", 3000)).await;
        let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
        let logged = POLICY.replace(
            "{ name: month, algorithm: fixed_window, limit: 10000, period: month }",
            "{ name: month, algorithm: sliding_log, limit: 10000, window: 30d }",
        );
        assert_ne!(logged, POLICY);
        let reloaded = s.rewrite("ai.yaml", &logged).await;
        assert!(reloaded.error.is_none(), "{reloaded:?}");
        let (status, answer) = s.post("/v1/commit", &commit(&id, 0)).await;
        assert_eq!(status, 200, "{backing:?}: {answer}");
        // The sliding log starts from nothing (another shape, another key) and the
        // release gives nothing back to it: nothing is charged there either.
        assert_eq!(remaining(&s, "t1").await, 10_000, "{backing:?}");
        // Back to the fixed window: its count still holds the estimate, never given back.
        let reloaded = s.rewrite("ai.yaml", POLICY).await;
        assert!(reloaded.error.is_none(), "{reloaded:?}");
        assert_eq!(
            remaining(&s, "t1").await,
            7_000,
            "{backing:?}: the estimate stays"
        );
    }
}
