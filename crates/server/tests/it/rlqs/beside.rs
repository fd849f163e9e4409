//! A report of 1,000 buckets on Redis beside a load of decisions: RLQS grants on a
//! connection of its own, 64 buckets a call, so every bucket is answered and no
//! decision fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;

/// Four clients ask `/v1/check` on the same Redis as fast as they are answered while
/// one stream reports 1,000 buckets three times (5 s apart on the manual clock): each
/// report is answered for all 1,000 buckets (none refused for a failed or
/// breaker-blocked store), and every decision is the store's (200 or 429, never
/// `degraded`, never an error). The decisions' store timeout is 250 ms here: a busy
/// test machine stalls a call past the service's 10 ms now and then, with RLQS or
/// without; how a report moves the decisions' latency is measured, in docs/envoy.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_of_1000_buckets_on_redis_is_answered_whole_and_fails_no_decision() {
    let backing = Backing::Redis(spillway_testkit::redis::standalone_url());
    let s = Arc::new(
        Server::start_with("rlqs-beside", &[("q.yaml", POLICY)], backing, |c| {
            c.store.timeout = Duration::from_millis(250);
        })
        .await,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = (0..4)
        .map(|client| {
            let (s, stop, decided) = (Arc::clone(&s), Arc::clone(&stop), Arc::clone(&decided));
            tokio::spawn(async move {
                let mut failed = Vec::new();
                for n in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let tenant = format!("decided-{client}-{}", n % 100);
                    let (status, _, body) = s
                        .check(serde_json::json!({ "domain": "q", "descriptors": [{
                            "entries": [{ "key": "tenant", "value": tenant }] }] }))
                        .await;
                    if !matches!(status, 200 | 429) || body["descriptors"][0]["degraded"] != false {
                        failed.push((status, body));
                    }
                    decided.fetch_add(1, Ordering::Relaxed);
                }
                failed
            })
        })
        .collect();
    // The load is running before the first report (a wait for what it did, not a guess).
    while decided.load(Ordering::Relaxed) < 100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let names: Vec<String> = (0..1000).map(|i| format!("beside-{i}")).collect();
    let usages = || -> Vec<BucketQuotaUsage> {
        (names.iter())
            .map(|t| usage(&[("tenant", t.as_str())], 100, 5))
            .collect()
    };
    let mut envoy = Envoy::subscribe(&s).await;
    let before = decided.load(Ordering::Relaxed);
    for report in 0..3 {
        let answer = envoy.report(&s, usages()).await;
        let rated = (strategies(&answer).values())
            .filter(|st| matches!(st, Some(Strategy::TokenBucket(_))))
            .count();
        assert_eq!(
            rated, 1000,
            "report {report}: {rated} of 1,000 buckets answered"
        );
        s.clock.advance(Duration::from_secs(5));
    }
    let during = decided.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    let mut failed = Vec::new();
    for task in load {
        failed.extend(task.await.unwrap());
    }
    let all = decided.load(Ordering::Relaxed);
    eprintln!("{all} decisions, {during} of them while the three reports were answered");
    assert!(
        failed.is_empty(),
        "{} of {all} decisions failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    assert!(during > 0, "decisions ran beside the reports");
}
