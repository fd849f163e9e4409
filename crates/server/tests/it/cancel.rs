//! #60: a take whose call ends before the store answered gives back what it may have
//! taken. Envoy resets a request-path call still in flight when its client goes away
//! (and then sends no stream-done call); the store has usually charged by then, and
//! three such resets a minute kept a tenant with a limit of 3 locked out. The store is
//! reached through a proxy that delays it, so the take is in flight when the call ends.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::json;
use spillway_core::{Clock, ManualClock, SystemClock, Timestamp};
use spillway_redis::{RedisStore, TimeSource};
use spillway_server::{AnyStore, Config, Running};
use spillway_testkit::proxy::{Proxy, ProxyMode};

const POLICY: &str = "
domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: request_id
        limits:
          - { name: in-flight, algorithm: concurrency, limit: 3, window: 60s }
";

/// The shared Redis behind a proxy, and a service on it (store `timeout`), on a manual
/// clock that stands still: no hold lapses during the test, so a free slot was given
/// back.
async fn behind_proxy(name: &str, timeout: Duration) -> (Running, Proxy, ManualClock) {
    let url = spillway_testkit::redis::standalone_url();
    let redis: SocketAddr = url.trim_start_matches("redis://").parse().unwrap();
    let proxy = Proxy::start(redis).await;
    let dir = support::tempdir(name);
    std::fs::write(dir.join("api.yaml"), POLICY).unwrap();
    let store = RedisStore::builder(format!("redis://{}", proxy.addr()))
        .prefix(spillway_testkit::redis::unique_prefix(name))
        .time_source(TimeSource::Caller)
        .timeout(timeout)
        .build()
        .await
        .unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let running = support::start(
        Config::ephemeral(&dir),
        AnyStore::Redis(store),
        Arc::new(clock.clone()),
    )
    .await
    .unwrap();
    (running, proxy, clock)
}

/// `acme`'s holds in use, by a look (cost 0) over HTTP.
async fn in_use(running: &Running) -> u64 {
    let body = json!({ "domain": "api", "cost": 0, "descriptors": [{ "entries": [
        { "key": "tenant", "value": "acme" }, { "key": "request_id", "value": "look" },
    ] }] });
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("http://{}/v1/check", running.http_addr))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // While the store's breaker is open a look is the failure policy's: not known.
    match answer["descriptors"][0]["degraded"].as_bool() {
        Some(false) => 3 - answer["descriptors"][0]["remaining"].as_u64().unwrap(),
        _ => u64::MAX,
    }
}

/// Waits (real time, at most 20 s) until `acme` holds `want`; how many it held last.
async fn until_in_use(running: &Running, want: u64) -> u64 {
    let start = SystemClock.now();
    loop {
        let now = in_use(running).await;
        if now == want || SystemClock.now().duration_since(start) > Duration::from_secs(20) {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn grpc_client(addr: SocketAddr) -> RateLimitServiceClient<tonic::transport::Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// A take of `acme`'s hold `id` over gRPC.
fn take(id: &str) -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    support::request("api", &[&[("tenant", "acme"), ("request_id", id)]])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_cancelled_during_the_store_call_gives_its_hold_back() {
    let (running, proxy, _) = behind_proxy("cancel", Duration::from_secs(10)).await;
    let mut grpc = grpc_client(running.grpc_addr).await;
    // The store answers a second late: each call below gives up (its future dropped,
    // the stream reset) while its take is on the way to Redis.
    proxy.set(ProxyMode::Delay(Duration::from_secs(1)));
    // Twenty: past 16 waiting, the Redis store's lane sends a second call from a
    // caller's own task; cancelled, that caller's call is finished on a task of its own
    // (it used to fail every batch it carried, so their takes were never given back).
    for n in 0..20 {
        let call = grpc.should_rate_limit(take(&format!("reset-{n}")));
        let gave_up = tokio::time::timeout(Duration::from_millis(100), call).await;
        assert!(
            gave_up.is_err(),
            "call {n} answered within 100 ms: {gave_up:?}"
        );
    }
    proxy.set(ProxyMode::Pass);
    // Every take reached Redis (and was charged, up to the limit); every one was
    // given back after it: the three slots are all free, on a clock that stood still.
    assert_eq!(until_in_use(&running, 0).await, 0, "slots still held");
    for n in 0..3 {
        let answer = grpc
            .should_rate_limit(take(&format!("after-{n}")))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            answer.overall_code, 1,
            "take {n} after the resets: {answer:?}"
        );
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_the_store_timed_out_on_gives_its_hold_back() {
    // The store's timeout (300 ms) passes while the take is on its way (a second):
    // answered by the rule's failure policy, the take may have committed, and did.
    let (running, proxy, clock) = behind_proxy("timed-out", Duration::from_millis(300)).await;
    let mut grpc = grpc_client(running.grpc_addr).await;
    proxy.set(ProxyMode::Delay(Duration::from_secs(1)));
    for n in 0..3 {
        let _ = grpc.should_rate_limit(take(&format!("slow-{n}"))).await;
    }
    proxy.set(ProxyMode::Pass);
    // The timeouts opened the store's breaker (its give-backs among them, which are
    // tried again): its cool-down runs on the service's clock, a few seconds of a
    // 60 s lease.
    clock.advance(Duration::from_secs(5));
    assert_eq!(until_in_use(&running, 0).await, 0, "slots still held");
    running.stop().await;
}
