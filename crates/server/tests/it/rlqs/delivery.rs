//! What is booked is what Envoy runs: a stream that never reads its answers, beside
//! one that reports the same buckets, never lets what the two last received pass the
//! rate, bucket by bucket.

use super::*;

/// One stream reports 1,000 buckets and never reads (two responses of them fill its
/// connection's 64 KiB window), another from another address reports the same buckets
/// and reads everything, a few times over. Then the first reads all it was sent: for
/// every bucket, its last share and the other's last share add up to no more than the
/// rate, and so do the bookings at every step.
#[tokio::test]
async fn a_stream_that_never_reads_never_lets_the_shares_pass_the_rate() {
    let s = Server::start("rlqs-stalled", &[("q.yaml", POLICY)], Backing::Memory).await;
    let names: Vec<String> = (0..1000).map(|i| format!("stalled-{i}")).collect();
    let usages = |requests: u64| -> Vec<BucketQuotaUsage> {
        (names.iter())
            .map(|t| usage(&[("tenant", t.as_str())], requests, 5))
            .collect()
    };
    let probe = bucket(&[("tenant", "stalled-0")]);
    // (A window of 64 KiB, HTTP/2's initial one: a response of 1,000 buckets nearly fills
    // it.)
    let mut stalled = Envoy::subscribe_with(&s, [127, 0, 0, 1], Some(65_535)).await;
    let mut other = Envoy::subscribe_from(&s, [127, 0, 0, 2]).await;
    stalled.send("q", usages(300)).await;
    for _ in 0..4 {
        s.clock.advance(Duration::from_secs(1));
        other.report(&s, usages(300)).await;
        assert!(explain(&s, &probe).await.booked_per_second <= 60.0 + 1e-9);
        stalled.send("q", usages(300)).await;
        assert!(explain(&s, &probe).await.booked_per_second <= 60.0 + 1e-9);
    }
    // Its window filled: fewer responses went than it sent reports (the rest waited,
    // the newest per bucket, and replaced one another).
    let sent = (explain(&s, &probe).await.holders.iter())
        .find(|h| h.stream == stalled.stream)
        .and_then(|h| h.sent)
        .unwrap();
    assert!(sent < 5, "{sent} responses went to a stream that read none");
    other.catch_up(&s, &probe).await;
    stalled.catch_up(&s, &probe).await;
    for name in &names {
        let id = bucket(&[("tenant", name.as_str())]);
        let key = sorted(&id);
        let mine = stalled.latest.get(&key).map_or(0.0, runs);
        let theirs = other.latest.get(&key).map_or(0.0, runs);
        assert!(mine + theirs <= 60.0, "{name}: {mine} + {theirs}");
    }
}

/// What an Envoy runs of a strategy, requests a second (`DENY_ALL`: none).
fn runs(strategy: &Option<Strategy>) -> f64 {
    match strategy {
        Some(Strategy::BlanketRule(r)) if *r == BlanketRule::DenyAll as i32 => 0.0,
        other => rate(other),
    }
}
