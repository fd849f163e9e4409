//! Reservations on Redis: a reservation is a key, kept with its charge in one call (in
//! its charge's slot on Cluster), which outlives the Spillway that made it, and which a
//! commit while the breaker is open keeps.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use spillway_core::{BreakerState, ManualClock, Timestamp};
use spillway_testkit::proxy::{Proxy, ProxyMode};

use super::{POLICY, commit, remaining, reserve, reserve_on};
use support::{Backing, Server, T0};

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
        // Long enough for a loaded machine's calls; the proxy's delay below is longer.
        c.store.timeout = Duration::from_millis(500);
    })
    .await;
    let (status, answer) = s.post("/v1/reserve", &reserve_on("open", "t1", 300)).await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["reservation"]["id"].as_str().unwrap().to_owned();

    // Two calls that time out (the proxy holds them past the store's timeout) open the
    // breaker; then Redis answers again on the same connection, but the breaker stays
    // open for its cooldown (on the service's manual clock).
    proxy.set(ProxyMode::Delay(Duration::from_millis(1500)));
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
