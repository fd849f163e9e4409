//! One client's heavy requests beside a light client's, on a real Redis: heavy batches
//! go to the store in calls of their own, one at a time, and both clients are answered
//! by the store. The store timeout here is 5 s, longer than any pause of a loaded
//! machine: with the default 10 ms, whether a light call times out would depend on the
//! machine, not on Spillway. That a heavy batch's timeouts leave the breaker shut is
//! core's `heavy` test (a store that never answers, on a paused clock); that a heavy
//! lane sends one batch a call, one call at a time, is the coalescer's unit test.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use spillway_testkit::redis::RedisServer;
use support::{Backing, Server};
use tokio::time::Instant;

fn policy(precision: u32) -> String {
    format!(
        "domain: iso
descriptors:
  - key: user
    limits: [{{ algorithm: fixed_window, limit: 1000000, window: 1h }}]
  - key: heavy
    on_store_error: open
    limits: [{{ algorithm: sliding_window, precision: {precision}, limit: 1000000, window: 1h }}]
"
    )
}

/// A heavy client (4 tasks sending 8-descriptor requests, each on a sliding window of
/// precision 1,000: 128 units of work, half what one request may ask) beside a light one:
/// 300 light answers, none degraded, the breaker shut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_requests_do_not_change_a_light_clients_answers() {
    let precision: u32 = 1000;
    let name = format!("iso-{}", std::process::id());
    // A Redis of its own: the other tests of this binary share none of its calls.
    let redis = RedisServer::start();
    let s = Arc::new(
        Server::start_with(
            &name,
            &[("iso.yaml", &policy(precision))],
            Backing::Redis(redis.url()),
            |c| {
                c.store.timeout = Duration::from_secs(5);
            },
        )
        .await,
    );
    let heavy_body = json!({ "domain": "iso", "descriptors": (0..16).map(|i| json!({ "entries": [{ "key": "heavy", "value": format!("h{i}") }] })).collect::<Vec<_>>() });
    let stop = Arc::new(AtomicBool::new(false));
    let heavy_sent = Arc::new(AtomicU64::new(0));
    let heavy_degraded = Arc::new(AtomicU64::new(0));
    let mut heavy = Vec::new();
    for _ in 0..4 {
        let (s, body, stop, sent, degraded) = (
            Arc::clone(&s),
            heavy_body.clone(),
            Arc::clone(&stop),
            Arc::clone(&heavy_sent),
            Arc::clone(&heavy_degraded),
        );
        heavy.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (_, _, answer) = s.check(body.clone()).await;
                sent.fetch_add(1, Ordering::Relaxed);
                if answer["descriptors"][0]["degraded"] == json!(true) {
                    degraded.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let light = json!({ "domain": "iso", "descriptors": [{ "entries": [{ "key": "user", "value": "light" }] }] });
    let mut worst = Duration::ZERO;
    let mut bad = Vec::new();
    for i in 0..300 {
        let started = Instant::now();
        let (status, _, answer) = s.check(light.clone()).await;
        worst = worst.max(started.elapsed());
        if status != 200 || answer["descriptors"][0]["degraded"] != json!(false) {
            bad.push(format!("{i}: {status} {answer}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in heavy {
        h.await.unwrap();
    }
    let breaker = s.running.state.service.stores().breaker().state();
    println!(
        "precision {precision}: heavy requests {} ({} degraded); light worst {worst:?}; breaker {breaker:?}",
        heavy_sent.load(Ordering::Relaxed),
        heavy_degraded.load(Ordering::Relaxed)
    );
    assert!(
        bad.is_empty(),
        "{} of 300 light answers degraded: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    assert_eq!(breaker, spillway_server::BreakerState::Closed);
}

/// A request asking more store work than `max_request_work` (64 descriptors on a
/// sliding window of precision 10,000: 10,048 units; one of them held Redis long enough
/// to time out every other caller and open the breaker) is refused before any store
/// call, saying why.
#[tokio::test]
async fn a_request_heavier_than_its_budget_is_refused_before_the_store() {
    let s = Server::start(
        "iso-budget",
        &[("iso.yaml", &policy(10_000))],
        Backing::Memory,
    )
    .await;
    let heavy = |n: usize| json!({ "domain": "iso", "descriptors": (0..n).map(|i| json!({ "entries": [{ "key": "heavy", "value": format!("h{i}") }] })).collect::<Vec<_>>() });
    let (status, _, answer) = s.check(heavy(64)).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("10048 units") && message.contains("max_request_work"),
        "{message}"
    );
    // One fits (157 units): the largest precision decides.
    assert_eq!(s.check(heavy(1)).await.0, 200);
}
