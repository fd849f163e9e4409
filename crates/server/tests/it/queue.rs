//! An in-flight (`concurrency`) take with `max_wait` waits for a release rather than
//! take a 429: first come first served across replicas on one Redis (its place kept in
//! the store, the slot handed to the head of the queue), a caller that goes away
//! leaves the queue and is handed nothing, and past `max_wait` a refusal with nothing
//! left in the queue. The replicas decide on a manual clock that stands still (no hold
//! or place lapses); the waits run on real time, each bounded well past any pause.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::json;
use spillway_core::{Clock, ManualClock, SystemClock, Timestamp};
use spillway_server::Running;

const POLICY: &str = "
domain: q
descriptors:
  - key: tenant
    descriptors:
      - key: request_id
        limits:
          - { name: in-flight, algorithm: concurrency, limit: 1, window: 60s, max_wait: 30s }
  - key: short
    descriptors:
      - key: request_id
        limits:
          - { name: brief, algorithm: concurrency, limit: 1, window: 60s, max_wait: 1s }
";

/// The longest any step below waits for something to happen (real time).
const PATIENCE: Duration = Duration::from_secs(20);

fn body(key: &str, id: &str, wait: bool) -> serde_json::Value {
    json!({ "domain": "q", "wait": wait, "descriptors": [{ "entries": [
        { "key": key, "value": "acme" }, { "key": "request_id", "value": id },
    ] }] })
}

async fn post(r: &Running, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let answer = reqwest::Client::new()
        .post(format!("http://{}{path}", r.http_addr))
        .json(body)
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

/// A take of `acme`'s hold `id` over gRPC, as Envoy sends it, on its own task.
fn grpc_take(addr: SocketAddr, id: &str) -> tokio::task::JoinHandle<RateLimitResponse> {
    let request = support::request("q", &[&[("tenant", "acme"), ("request_id", id)]]);
    tokio::spawn(async move {
        let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        client
            .should_rate_limit(request)
            .await
            .unwrap()
            .into_inner()
    })
}

/// The waiters in the queues of every key under `prefix`, read from Redis: each
/// concurrency state is the newest time (8 bytes), then per entry its lapse (8), its
/// cost (a double, 8: negated for a waiter), its id's length (4) and its id.
async fn waiters(url: &str, prefix: &str) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut n = 0;
    for key in keys {
        let Ok(Some(v)) = redis::cmd("GET")
            .arg(&key)
            .query_async::<Option<Vec<u8>>>(&mut redis)
            .await
        else {
            continue;
        };
        let mut p = 8;
        while p + 20 <= v.len() {
            let cost = f64::from_le_bytes(v[p + 8..p + 16].try_into().unwrap());
            let len = u32::from_le_bytes(v[p + 16..p + 20].try_into().unwrap()) as usize;
            n += usize::from(cost < 0.0);
            p += 20 + len;
        }
    }
    n
}

/// Waits (real time, at most [`PATIENCE`]) until `want` wait under `prefix`.
async fn until_waiting(url: &str, prefix: &str, want: usize) {
    let start = SystemClock.now();
    loop {
        let n = waiters(url, prefix).await;
        if n == want {
            return;
        }
        let waited = SystemClock.now().duration_since(start);
        assert!(
            waited < PATIENCE,
            "{n} waiting, not {want}, after {waited:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two replicas on the shared Redis under a prefix of their own, on one manual clock.
async fn two_replicas(name: &str) -> (Vec<Running>, String, String) {
    let url = spillway_testkit::redis::standalone_url();
    let prefix = spillway_testkit::redis::unique_prefix(name);
    let dir = support::tempdir(name);
    std::fs::write(dir.join("q.yaml"), POLICY).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let mut replicas = Vec::new();
    for _ in 0..2 {
        replicas.push(support::start_on_redis(&url, &prefix, &dir, &clock).await);
    }
    (replicas, url, prefix)
}

/// Whether `task` finishes within [`PATIENCE`].
async fn finishes<T>(task: &mut tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("answered within the patience")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_waits_for_a_release_on_another_replica_first_come_first_served() {
    let (replicas, url, prefix) = two_replicas("queue-fifo").await;
    let (a, b) = (&replicas[0], &replicas[1]);
    let (status, answer) = post(a, "/v1/acquire", &body("tenant", "h0", false)).await;
    assert_eq!(status, 200, "{answer}");
    // Three wait, in this order, on both replicas and two APIs.
    let mut w1 = grpc_take(b.grpc_addr, "w1");
    until_waiting(&url, &prefix, 1).await;
    let mut w2 = grpc_take(a.grpc_addr, "w2");
    until_waiting(&url, &prefix, 2).await;
    let mut w3 = {
        let b = b.http_addr;
        tokio::spawn(async move {
            let answer = reqwest::Client::new()
                .post(format!("http://{b}/v1/acquire"))
                .json(&body("tenant", "w3", true))
                .send()
                .await
                .unwrap();
            answer.status().as_u16()
        })
    };
    until_waiting(&url, &prefix, 3).await;
    // A caller that cannot wait does not pass the queue.
    let (status, answer) = post(a, "/v1/acquire", &body("tenant", "p", false)).await;
    assert_eq!(status, 429, "{answer}");
    // Each release on one replica hands the slot to the head, wherever it waits; the
    // others wait on (nobody else can be admitted while the slot is held).
    let release = |id: &'static str| async move {
        let (status, _) = post(a, "/v1/release", &body("tenant", id, false)).await;
        assert_eq!(status, 200);
    };
    release("h0").await;
    assert_eq!(finishes(&mut w1).await.overall_code, Code::Ok as i32);
    assert!(!w2.is_finished() && !w3.is_finished(), "only the head goes");
    until_waiting(&url, &prefix, 2).await;
    release("w1").await;
    assert_eq!(finishes(&mut w2).await.overall_code, Code::Ok as i32);
    assert!(!w3.is_finished(), "w3 waits behind w2");
    release("w2").await;
    assert_eq!(finishes(&mut w3).await, 200);
    until_waiting(&url, &prefix, 0).await;
    for r in replicas {
        r.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_client_went_away_leaves_the_queue_and_is_handed_nothing() {
    let (replicas, url, prefix) = two_replicas("queue-gone").await;
    let (a, b) = (&replicas[0], &replicas[1]);
    let (status, _) = post(a, "/v1/acquire", &body("tenant", "h0", false)).await;
    assert_eq!(status, 200);
    let gone = grpc_take(b.grpc_addr, "gone");
    until_waiting(&url, &prefix, 1).await;
    // Its caller goes away (the stream reset, as Envoy resets it when its client
    // does): its place is given back.
    gone.abort();
    until_waiting(&url, &prefix, 0).await;
    let mut next = grpc_take(a.grpc_addr, "next");
    until_waiting(&url, &prefix, 1).await;
    let (status, _) = post(b, "/v1/release", &body("tenant", "h0", false)).await;
    assert_eq!(status, 200);
    assert_eq!(finishes(&mut next).await.overall_code, Code::Ok as i32);
    // The slot is `next`'s, not the gone caller's: one held, nobody waiting.
    let look = json!({ "domain": "q", "cost": 0, "descriptors": [{ "entries": [
        { "key": "tenant", "value": "acme" }, { "key": "request_id", "value": "look" },
    ] }] });
    let (_, answer) = post(a, "/v1/check", &look).await;
    assert_eq!(answer["descriptors"][0]["remaining"], 0, "{answer}");
    let (status, _) = post(a, "/v1/release", &body("tenant", "next", false)).await;
    assert_eq!(status, 200);
    let (_, answer) = post(a, "/v1/check", &look).await;
    assert_eq!(answer["descriptors"][0]["remaining"], 1, "{answer}");
    until_waiting(&url, &prefix, 0).await;
    for r in replicas {
        r.stop().await;
    }
}

/// A replica cut off from Redis (killed, or its network gone) while one of its
/// requests waits at the head of the queue can neither ask again nor give its place
/// back: the place lapses `WAITER_GRACE` (two seconds on the store's clock) after it
/// last asked, and the request behind it, on another replica, is admitted then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_replicas_waiter_holds_the_queue_no_longer_than_the_grace() {
    use spillway_testkit::proxy::{Proxy, ProxyMode};
    let url = spillway_testkit::redis::standalone_url();
    let prefix = spillway_testkit::redis::unique_prefix("queue-cut");
    let dir = support::tempdir("queue-cut");
    std::fs::write(dir.join("q.yaml"), POLICY).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let a = support::start_on_redis(&url, &prefix, &dir, &clock).await;
    let proxy = Proxy::start(url.trim_start_matches("redis://").parse().unwrap()).await;
    let proxied = format!("redis://{}", proxy.addr());
    let cut = support::start_on_redis(&proxied, &prefix, &dir, &clock).await;
    let (status, _) = post(&a, "/v1/acquire", &body("tenant", "h0", false)).await;
    assert_eq!(status, 200);
    let _dead = grpc_take(cut.grpc_addr, "dead");
    until_waiting(&url, &prefix, 1).await;
    proxy.set(ProxyMode::Blackhole);
    let mut alive = grpc_take(a.grpc_addr, "alive");
    until_waiting(&url, &prefix, 2).await;
    let (status, _) = post(&a, "/v1/release", &body("tenant", "h0", false)).await;
    assert_eq!(status, 200);
    // The dead waiter's place is live on a clock that stands still: `alive` waits
    // behind it (a few of its polls).
    let behind = tokio::time::timeout(Duration::from_secs(1), &mut alive).await;
    assert!(behind.is_err(), "admitted past the head: {behind:?}");
    clock.advance(spillway_core::algorithm::concurrency::WAITER_GRACE);
    assert_eq!(finishes(&mut alive).await.overall_code, Code::Ok as i32);
    until_waiting(&url, &prefix, 0).await;
    a.stop().await;
    proxy.set(ProxyMode::Reset);
    cut.stop().await;
}

/// Past `max_wait` (a second), a refusal told when to come back, and nothing left in
/// the queue; on every backing, the server waits at least the second first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_wait_a_waiting_take_is_refused_and_leaves_no_trace() {
    let (replicas, url, prefix) = two_replicas("queue-expiry").await;
    let a = &replicas[0];
    let (status, _) = post(a, "/v1/acquire", &body("short", "h0", false)).await;
    assert_eq!(status, 200);
    let started = SystemClock.now();
    let (status, answer) = post(a, "/v1/acquire", &body("short", "late", true)).await;
    let took = SystemClock.now().duration_since(started);
    assert_eq!(status, 429, "{answer}");
    assert!(took >= Duration::from_secs(1), "refused after {took:?}");
    assert_eq!(answer["denied_by"]["rule"], "brief", "{answer}");
    assert!(
        answer["descriptors"][0]["retry_after_ms"].as_u64().unwrap() > 0,
        "{answer}"
    );
    until_waiting(&url, &prefix, 0).await;
    // Nothing waits: the slot, once given back, goes at once.
    let (status, _) = post(a, "/v1/release", &body("short", "h0", false)).await;
    assert_eq!(status, 200);
    let (status, answer) = post(a, "/v1/acquire", &body("short", "now", false)).await;
    assert_eq!(status, 200, "{answer}");
    for r in replicas {
        r.stop().await;
    }
}
