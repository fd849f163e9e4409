//! Reservations through the service, over real sockets, on memory and Redis:
//! `/v1/reserve` charges an estimate if it fits, `/v1/commit` settles it with what the
//! work used (the rest given back, the excess charged into debt); a reservation is
//! committed once; one left uncommitted past its TTL keeps its estimate charged; on
//! Redis it survives a restart of Spillway, lives in its charge's slot on Cluster, and
//! lands with its charge or not at all; a commit while the breaker is open keeps it.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use spillway_core::{BreakerState, ManualClock, Timestamp};
use spillway_testkit::proxy::{Proxy, ProxyMode};

use support::{Backing, Server, T0, backings};

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

/// On Redis a reservation is a key: a Spillway started after the one that made it (a
/// restart, or another replica) commits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_on_redis_survives_a_restart() {
    let url = spillway_testkit::redis::standalone_url();
    let prefix = spillway_testkit::redis::unique_prefix("reserve-restart");
    let dir = support::tempdir("reserve-restart");
    std::fs::write(dir.join("ai.yaml"), POLICY).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(T0));
    let serve = || support::start_on_redis(&url, &prefix, &dir, &clock);
    let http = reqwest::Client::new();
    let post = |running: &spillway_server::Running, path: &str, body: Value| {
        let request = http
            .post(format!("http://{}{path}", running.http_addr))
            .json(&body);
        async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let first = serve().await;
    let (_, answer) = post(&first, "/v1/reserve", reserve("t1", 4000)).await;
    let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
    first.stop().await;

    let second = serve().await;
    let (status, answer) = post(&second, "/v1/commit", commit(&id, 1000)).await;
    assert_eq!(status, 200, "{answer}");
    let (_, answer) = post(&second, "/v1/check", reserve("t1", 0)).await;
    assert_eq!(answer["descriptors"][0]["remaining"], 9000, "{answer}");
    second.stop().await;
}

/// 1,000 units per 1,000 hours on a token bucket (a unit an hour: the tests move the
/// manual clock by seconds, which refills nothing), under each failure policy.
const FAULT_POLICY: &str = "
domain: ai
descriptors:
  - key: open
    on_store_error: open
    limits:
      - { name: open, algorithm: token_bucket, limit: 1000, window: 1000h }
  - key: closed
    on_store_error: closed
    limits:
      - { name: closed, algorithm: token_bucket, limit: 1000, window: 1000h }
";

/// A service on the test Redis through `proxy`, and a connection to that Redis past it.
async fn behind(
    proxy: &Proxy,
    name: &str,
    tweak: impl FnOnce(&mut spillway_server::Config),
) -> (Server, redis::aio::MultiplexedConnection) {
    let url = spillway_testkit::redis::standalone_url();
    let s = Server::start_with(
        name,
        &[("ai.yaml", FAULT_POLICY)],
        Backing::Redis(format!("redis://{}", proxy.addr())),
        tweak,
    )
    .await;
    let conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    (s, conn)
}

fn upstream() -> std::net::SocketAddr {
    let url = spillway_testkit::redis::standalone_url();
    let addr = url.trim_start_matches("redis://").trim_end_matches('/');
    addr.parse().unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// The prefix of the service's keys in Redis (a test's own).
fn prefix(s: &Server) -> String {
    let spillway_server::AnyStore::Redis(store) = s.running.state.service.stores().store() else {
        panic!("a service on Redis")
    };
    let key = store
        .record_key("r")
        .expect("a handle of the standalone form");
    key.strip_suffix("reservation:r")
        .expect("the record key's form")
        .to_owned()
}

/// The keys of the service `s` in Redis matching `pattern` after its prefix.
async fn keys(s: &Server, conn: &redis::aio::MultiplexedConnection, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{}{pattern}", prefix(s)))
        .query_async(&mut conn.clone())
        .await
        .unwrap()
}

/// The reservation records the service `s` keeps in Redis.
async fn records(s: &Server, conn: &redis::aio::MultiplexedConnection) -> Vec<String> {
    keys(s, conn, "reservation:*").await
}

/// What is left of `key=tenant`'s budget, once the store answers again: asked with a
/// look at a `closed` rule in the same request, which answers 503 unless the store
/// decided (an `open` rule alone would be admitted in full by its policy).
async fn left(s: &Server, key: &str, tenant: &str) -> u64 {
    let look = json!({
        "domain": "ai",
        "cost": 0,
        "descriptors": [
            { "entries": [{ "key": "closed", "value": "probe" }] },
            { "entries": [{ "key": key, "value": tenant }] }
        ]
    });
    for _ in 0..200 {
        let (status, _, answer) = s.check(look.clone()).await;
        if status == 200 {
            return answer["descriptors"][1]["remaining"].as_u64().unwrap();
        }
        // Past the breaker's cooldown (on the service's manual clock), for its probe.
        s.advance(Duration::from_secs(1));
        tokio::task::yield_now().await;
    }
    panic!("the store never answered again")
}

/// Ends every connection through `proxy` (the service's included: bytes lost on one
/// leave its replies out of line), then lets traffic pass again: the service's next
/// call fails on the dead connection, and it connects anew.
async fn reset(proxy: &Proxy, s: &Server) {
    proxy.set(ProxyMode::Reset);
    // A call on the reset connection, which fails: it has seen the reset.
    s.check(reserve_on("closed", "probe", 0)).await;
    proxy.set(ProxyMode::Pass);
}

/// The estimate's charge and the reservation's record are one store call (one script
/// call on Redis), so whatever happens to that call, both land or neither does. It
/// used to be two calls (the charge, then the record's `SET`): a store failing between
/// them left a charge with no id to commit, and a 503 under every failure policy.
/// Through a proxy: a call that never reaches Redis lands neither; a call whose reply
/// is lost lands both (the record then expires with its estimate charged, as any
/// uncommitted reservation does). Under `open` the answer is 200 with no reservation
/// (nothing was charged that the caller could commit); only `closed` answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_and_its_charge_land_together_or_not_at_all() {
    let name = "reserve-one-call";
    let proxy = Proxy::start(upstream()).await;
    let (s, conn) = behind(&proxy, name, |_| {}).await;

    // The call never reaches Redis: nothing lands.
    proxy.set(ProxyMode::Blackhole);
    let (status, answer) = s.post("/v1/reserve", &reserve_on("open", "t1", 100)).await;
    assert_eq!(status, 200, "open admits: {answer}");
    assert!(
        answer.get("reservation").is_none(),
        "nothing to commit: {answer}"
    );
    let (status, answer) = s
        .post("/v1/reserve", &reserve_on("closed", "t1", 100))
        .await;
    assert_eq!(status, 503, "closed refuses: {answer}");
    assert_eq!(answer["error"]["kind"], "store_unavailable");
    reset(&proxy, &s).await;
    assert_eq!(left(&s, "open", "t1").await, 1000, "no charge");
    assert_eq!(left(&s, "closed", "t1").await, 1000, "no charge");
    assert!(records(&s, &conn).await.is_empty(), "no record");

    // The call reaches Redis and its reply is lost: both land.
    proxy.set(ProxyMode::LoseReplies);
    let (status, answer) = s.post("/v1/reserve", &reserve_on("open", "t2", 100)).await;
    assert_eq!(status, 200, "open admits: {answer}");
    assert!(
        answer.get("reservation").is_none(),
        "no id came back: {answer}"
    );
    reset(&proxy, &s).await;
    assert_eq!(left(&s, "open", "t2").await, 900, "the charge landed");
    let kept = records(&s, &conn).await;
    assert_eq!(kept.len(), 1, "and its record with it: {kept:?}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&kept[0])
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 300_000,
        "it expires as any reservation: {ttl}"
    );

    // And with the store answering, a reservation commits as ever.
    let (status, answer) = s.post("/v1/reserve", &reserve_on("open", "t3", 100)).await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
    let (status, answer) = s.post("/v1/commit", &commit(&id, 40)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(left(&s, "open", "t3").await, 960);
}

/// A commit while the breaker is open does not reach the store: 503, and the
/// reservation is kept (nothing is taken, nothing is settled). It used to take the
/// record past the breaker and settle on the failure policy's answer: 200 "settled",
/// with nothing charged or given back in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_while_the_breaker_is_open_keeps_the_reservation() {
    let name = "reserve-breaker";
    let proxy = Proxy::start(upstream()).await;
    let (s, conn) = behind(&proxy, name, |c| {
        c.store.breaker_failures = 2;
        c.store.breaker_cooldown = Duration::from_secs(30);
    })
    .await;
    let (status, answer) = s.post("/v1/reserve", &reserve_on("open", "t1", 300)).await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["reservation"]["id"].as_str().unwrap().to_owned();

    // Two calls that time out (the proxy holds them past the store's timeout) open the
    // breaker; then Redis answers again on the same connection, but the breaker stays
    // open for its cooldown (on the service's manual clock).
    proxy.set(ProxyMode::Delay(Duration::from_millis(50)));
    for late in ["late-1", "late-2"] {
        s.check(reserve_on("open", late, 1)).await;
    }
    assert_eq!(
        s.running.state.service.stores().breaker().state(),
        BreakerState::Open
    );
    proxy.set(ProxyMode::Pass);
    // The held calls reach Redis in the end: once both have, the connection is free.
    for late in ["late-1", "late-2"] {
        let pattern = format!("*open={late}*");
        let arrived =
            support::eventually(|| async { !keys(&s, &conn, &pattern).await.is_empty() }).await;
        assert!(arrived, "{late} reached Redis");
    }

    for _ in 0..2 {
        let (status, answer) = s.post("/v1/commit", &commit(&id, 100)).await;
        assert_eq!(status, 503, "{answer}");
        assert_eq!(answer["error"]["kind"], "store_unavailable", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("kept"), "{message}");
    }
    assert_eq!(records(&s, &conn).await.len(), 1, "the record is kept");

    // Nothing was settled: the estimate is still charged. Once the store answers again
    // (past the cooldown), the commit settles.
    assert_eq!(left(&s, "open", "t1").await, 700, "the estimate, unsettled");
    let (status, answer) = s.post("/v1/commit", &commit(&id, 100)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["settled"], json!({ "estimate": 300, "used": 100 }));
    assert_eq!(
        left(&s, "open", "t1").await,
        900,
        "200 of the estimate given back"
    );
    assert!(records(&s, &conn).await.is_empty(), "taken once");
}

/// On Redis Cluster the record lives in its charge's slot (one script call holds only
/// one slot's keys): its id carries the slot's hash tag, and any replica commits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_on_cluster_lives_in_its_charges_slot() {
    let url = spillway_testkit::redis::cluster_url();
    let s = Server::start(
        "reserve-cluster",
        &[("ai.yaml", POLICY)],
        Backing::Redis(url),
    )
    .await;
    for tenant in ["t1", "t2", "t3", "t4"] {
        let (status, answer) = s.post("/v1/reserve", &reserve(tenant, 3000)).await;
        assert_eq!(status, 200, "{answer}");
        let id = answer["reservation"]["id"].as_str().unwrap().to_owned();
        assert!(id.contains('-'), "a slot's tag after the id: {id}");
        assert_eq!(remaining(&s, tenant).await, 7000);
        let (status, answer) = s.post("/v1/commit", &commit(&id, 1000)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(remaining(&s, tenant).await, 9000);
        let (status, _) = s.post("/v1/commit", &commit(&id, 1000)).await;
        assert_eq!(status, 404, "once");
    }
    // A tag that is not hex, or a tagged id on a store that gives none, is no id.
    let (status, _) = s
        .post(
            "/v1/commit",
            &commit("r0123456789abcdef0123456789abcdef-zz", 1),
        )
        .await;
    assert_eq!(status, 404);
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
