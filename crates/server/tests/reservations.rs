//! Reservations through the service, over real sockets, on memory and Redis:
//! `/v1/reserve` charges an estimate if it fits, `/v1/commit` settles it with what the
//! work used (the rest given back, the excess charged into debt); a reservation is
//! committed once; one left uncommitted past its TTL keeps its estimate charged; on
//! Redis it survives a restart of Spillway.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use spillway_core::{ManualClock, Timestamp};

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
";

fn reserve(tenant: &str, estimate: u64) -> Value {
    json!({
        "domain": "ai",
        "cost": estimate,
        "descriptors": [{ "entries": [{ "key": "tenant", "value": tenant }] }]
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
    let logged = json!({
        "domain": "ai", "cost": 5,
        "descriptors": [{ "entries": [{ "key": "logged", "value": "x" }] }]
    });
    let bad = [
        (logged, "cannot take a reservation"),
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
