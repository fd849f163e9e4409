//! Budget alerts (`alert_at`) across replicas: two Spillways on one Redis charging one
//! tenant's month at once send each threshold exactly once, to a webhook that is down
//! when they are reached and is delivered to once it is back, within the retry bound.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use spillway_core::{ManualClock, Timestamp};
use spillway_redis::{RedisStore, TimeSource};
use spillway_server::{AnyStore, Config};

const BUDGET: &str = "
domain: budget-alerts
descriptors:
  - key: tenant
    limits:
      - { name: month, algorithm: fixed_window, limit: 1000, period: month, metered: true, alert_at: [0.8, 1.0] }
";

/// 2023-12-01T00:00:00Z: the end of the month holding `support::T0`, in ms.
const MONTH_END_MS: u64 = 1_701_388_800_000;

/// A webhook receiver on `port`: what it was sent, in order.
async fn receiver(port: u16) -> Arc<Mutex<Vec<Value>>> {
    use axum::{Json, Router, extract::State, routing::post};
    let got = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route(
            "/alerts",
            post(
                |State(got): State<Arc<Mutex<Vec<Value>>>>, Json(event): Json<Value>| async move {
                    got.lock().push(event);
                },
            ),
        )
        .with_state(Arc::clone(&got));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the receiver's port is free");
    tokio::spawn(async move { axum::serve(listener, app).await });
    got
}

/// `spillway_budget_alerts_total` of the test's domain for `outcome`, as `/metrics` on
/// `addr` says (the replicas of this process share one recorder).
async fn counted(addr: std::net::SocketAddr, outcome: &str) -> u64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("spillway_budget_alerts_total{")
                && l.contains("domain=\"budget-alerts\"")
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_send_each_threshold_once_and_a_webhook_down_gets_it_when_back() {
    // A port nothing listens on yet: the webhook is down.
    let port = spillway_testkit::port::free();
    let dir = support::tempdir("budget-alerts");
    std::fs::write(dir.join("ai.yaml"), BUDGET).unwrap();
    let prefix = spillway_testkit::redis::unique_prefix("budget-alerts");
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let mut config = Config::ephemeral(&dir);
        config.service.alert_webhook = Some(format!("http://127.0.0.1:{port}/alerts"));
        let store = RedisStore::builder(spillway_testkit::redis::standalone_url())
            .prefix(&prefix)
            .time_source(TimeSource::Caller)
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("connect to the test Redis");
        let running = support::start(config, AnyStore::Redis(store), Arc::new(clock.clone()))
            .await
            .unwrap_or_else(|e| panic!("start: {e}"));
        replicas.push(running);
    }

    // Eight clients, four on each replica, report usage of 1–40 tokens until 1,200 are
    // reported: past 0.8 and 1.0 of the month, each crossed by whichever charge got
    // there, on either replica.
    let reported = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let clients: Vec<_> = (0..8u64)
        .map(|c| {
            let (addr, reported) = (replicas[(c % 2) as usize].http_addr, Arc::clone(&reported));
            tokio::spawn(async move {
                use std::sync::atomic::Ordering;
                let http = reqwest::Client::new();
                let mut n = c;
                while reported.load(Ordering::Relaxed) < 1200 {
                    n = n * 7 + 3;
                    let tokens = 1 + n % 40;
                    let body = json!({ "domain": "budget-alerts", "cost": tokens, "descriptors": [{ "entries": [{ "key": "tenant", "value": "acme" }] }] });
                    let r = http
                        .post(format!("http://{addr}/v1/check"))
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    assert!(r.status().is_success() || r.status() == 429, "{}", r.status());
                    reported.fetch_add(tokens, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    let used = reported.load(std::sync::atomic::Ordering::Relaxed);
    assert!(used >= 1200);
    let addr = replicas[0].http_addr;
    assert_eq!(
        counted(addr, "reached").await,
        2,
        "one per threshold, both replicas together"
    );
    assert_eq!(counted(addr, "sent").await, 0, "the webhook is down");

    // The webhook comes back: the two events arrive within the retry bound (the wait
    // between tries is at most 30 s), once each.
    let got = receiver(port).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while counted(addr, "sent").await < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not delivered: {:?}",
            got.lock()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut events = got.lock().clone();
    assert_eq!(events.len(), 2, "{events:#?}");
    // Each replica sends its own in order; the two replicas' retries run apart, so
    // which threshold arrives first is not promised (on a busy machine, 1.0 has).
    events.sort_by(|a, b| {
        a["threshold"]
            .as_f64()
            .partial_cmp(&b["threshold"].as_f64())
            .unwrap()
    });
    for (event, threshold) in events.iter().zip([0.8, 1.0]) {
        assert_eq!(event["domain"], "budget-alerts");
        assert_eq!(event["path"], "tenant=acme");
        assert_eq!(event["limit"], "month");
        assert_eq!(event["threshold"], threshold);
        assert_eq!(event["budget"], 1000);
        assert_eq!(event["period_end_ms"], MONTH_END_MS);
        let at = event["used"].as_u64().unwrap();
        assert!(
            at >= (threshold * 1000.0) as u64 && at < (threshold * 1000.0) as u64 + 40 * 8,
            "{event}"
        );
    }
    assert_eq!(
        counted(addr, "dropped").await + counted(addr, "failed").await,
        0
    );
}

/// A threshold that is not a part of the limit, or on a limit that has no period, is
/// refused where the policy is read, naming `alert_at`.
#[tokio::test]
async fn alert_at_is_checked_where_the_policy_is_read() {
    for (limit, why) in [
        (
            "{ algorithm: fixed_window, limit: 10, window: 1h, alert_at: [1.5] }",
            "not a part of the limit",
        ),
        (
            "{ algorithm: fixed_window, limit: 10, window: 1h, alert_at: [0.9, 0.8] }",
            "ascending",
        ),
        (
            "{ algorithm: gcra, limit: 10, window: 1s, alert_at: [0.8] }",
            "not gcra",
        ),
        (
            "{ algorithm: fixed_window, limit: 10, window: 1h, lease: 2, alert_at: [0.8] }",
            "no lease or sync",
        ),
    ] {
        let dir = support::tempdir("alert-at");
        let policy = format!("domain: d\ndescriptors:\n  - key: k\n    limits: [{limit}]\n");
        std::fs::write(dir.join("d.yaml"), &policy).unwrap();
        let e = spillway_policy::load(&dir).unwrap_err().to_string();
        assert!(e.contains("alert_at") && e.contains(why), "{policy}: {e}");
    }
}
