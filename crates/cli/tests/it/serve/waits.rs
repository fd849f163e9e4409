//! Waiting through HTTP: fifty callers, each sending its next request once the last is
//! answered, ten requests each, against 200 a second (burst 1) with waits up to 500 ms,
//! `/v1/check` with `"wait": true` on a real `spillway serve` (the system clock): none
//! is refused, no wait is longer than the queue of fifty implies (250 ms), and the 500
//! admissions take at least the 2.5 s the rate allows, whatever the machine's load adds;
//! `spillway_waiters` counts the answers held meanwhile, and none after.
//! (The tower layer's twin: tower/tests/it/waits.rs.)

use crate::support;

use std::time::Duration;

use spillway_core::{Clock, SystemClock};
use support::Procs;
use support::envoy::spillway;

const POLICY: &str = "domain: w
descriptors:
  - key: tenant
    limits:
      - { name: paced, algorithm: gcra, limit: 200, window: 1s, burst: 1, max_wait: 500ms }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_callers_over_http_all_wait_their_turn_and_the_rate_holds() {
    const CALLERS: usize = 50;
    const EACH: usize = 10;
    let mut procs = Procs(Vec::new());
    let (_, http) = spillway(&mut procs, POLICY);
    let url = format!("http://127.0.0.1:{http}/v1/check");
    let body = serde_json::json!({ "domain": "w", "wait": true,
        "descriptors": [{ "entries": [{ "key": "tenant", "value": "t" }] }] });
    let client = reqwest::Client::new();
    let started = SystemClock.now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            tokio::spawn(async move {
                let (mut refused, mut longest) = (0, 0);
                for _ in 0..EACH {
                    let r = client.post(&url).json(&body).send().await.unwrap();
                    let status = r.status().as_u16();
                    let answer: serde_json::Value = r.json().await.unwrap();
                    if status != 200 {
                        refused += 1;
                    }
                    longest = longest.max(answer["wait_ms"].as_u64().unwrap_or(u64::MAX));
                }
                (refused, longest)
            })
        })
        .collect();
    // Meanwhile `spillway_waiters` counts the answers held: some, never more than the
    // callers.
    let watch = {
        let (client, metrics) = (client.clone(), format!("http://127.0.0.1:{http}/metrics"));
        let callers = callers.iter().map(|c| c.abort_handle()).collect::<Vec<_>>();
        tokio::spawn(async move {
            let mut most = 0.0f64;
            while callers.iter().any(|c| !c.is_finished()) {
                most = most.max(waiters(&client, &metrics).await);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (most, waiters(&client, &metrics).await)
        })
    };
    let (mut refused, mut longest) = (0, 0);
    for c in callers {
        let (r, l) = c.await.unwrap();
        refused += r;
        longest = longest.max(l);
    }
    let took = SystemClock.now().duration_since(started);
    let admitted = CALLERS * EACH;
    assert_eq!(refused, 0, "{refused} refused");
    // At most fifty queue at once, 5 ms apart.
    assert!(longest <= 250, "a wait of {longest} ms");
    let fastest = Duration::from_millis(5 * (admitted as u64 - 1));
    assert!(took >= fastest, "{admitted} admitted in {took:?}");
    eprintln!(
        "{admitted} admitted in {took:?} (at least {fastest:?}), the longest wait {longest} ms"
    );
    let (most, after) = watch.await.unwrap();
    eprintln!("spillway_waiters: at most {most} seen, {after} after");
    assert!(most > 0.0 && most <= CALLERS as f64, "{most} waiters");
    assert_eq!(
        after, 0.0,
        "answers still held after every caller had its answer"
    );
}

/// `spillway_waiters{api="http"}` in the service's /metrics (0 before any wait).
async fn waiters(client: &reqwest::Client, metrics: &str) -> f64 {
    let text = client
        .get(metrics)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("spillway_waiters{api=\"http\"} "))
        .map_or(0.0, |v| v.parse().unwrap())
}
