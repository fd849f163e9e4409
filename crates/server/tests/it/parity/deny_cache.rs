//! The reference's local cache: keys over their limit answered without the store.

use super::*;

/// `LOCAL_CACHE_SIZE_IN_BYTES`: a key over its limit is answered OVER_LIMIT from this
/// server's cache until its window ends, and its counter stops growing, as in the
/// reference (without it, every denied hit is counted). The answers are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_cache_answers_keys_over_their_limit() {
    let yaml = "domain: lc\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n";
    for backing in backings() {
        for cache in [true, false] {
            let s = Server::start_with(
                "parity-local-cache",
                &[("lc.yaml", yaml)],
                backing.clone(),
                |settings| {
                    settings.store.deny_cache_bytes = 1 << 20;
                    settings.store.reference_local_cache = cache;
                },
            )
            .await;
            let hits_before = deny_cache_hits(&s).await;
            let mut seen = Vec::new();
            for _ in 0..6 {
                let r = s.should("lc", &[("user", "u1")]).await;
                seen.push((r.overall_code, r.statuses[0].limit_remaining));
            }
            let over = Code::OverLimit as i32;
            assert_eq!(
                seen,
                [(OK, 1), (OK, 0), (over, 0), (over, 0), (over, 0), (over, 0)],
                "{backing:?} cache={cache}"
            );
            let answered_here = deny_cache_hits(&s).await - hits_before;
            if cache {
                // Other tests of this process may hit the cache too: at least these.
                assert!(answered_here >= 3, "{backing:?}: {answered_here}");
            }
            if let Backing::Redis(url) = &backing {
                let (mut c, keys) = redis_keys(url, "test:parity-local-cache:*").await;
                assert_eq!(keys.len(), 1, "{keys:?}");
                // A fixed window's state: its window's count, a plain integer.
                let count: u64 = redis::cmd("GET")
                    .arg(&keys[0])
                    .query_async(&mut c)
                    .await
                    .unwrap();
                assert_eq!(
                    count,
                    if cache { 3 } else { 6 },
                    "cache={cache}: the count stops at the first denial"
                );
                let _: () = redis::cmd("DEL")
                    .arg(&keys[0])
                    .query_async(&mut c)
                    .await
                    .unwrap();
            }
        }
    }
}

/// `spillway_deny_cache_hits_total` as `/metrics` reads it.
async fn deny_cache_hits(s: &Server) -> u64 {
    s.get_text("/metrics")
        .await
        .lines()
        .find_map(|l| l.strip_prefix("spillway_deny_cache_hits_total "))
        .map_or(0, |v| v.trim().parse().unwrap())
}
