//! Every key a decision writes has a TTL, on every deployment.

use crate::store::{key, limit};
use crate::support;

use support::{cmd, int};

use std::time::Duration;

use redis::Value;
use spillway_core::{Algorithm, Edge, Key, Limit, Request, Store, Timestamp};
use spillway_redis::RedisStore;

/// Every key the script writes carries a TTL, whatever wrote it: admitted and
/// rejected charges, count_rejected, peeks, shared keys in one batch, every algorithm.
#[tokio::test]
async fn every_key_written_has_a_ttl() {
    // Redis 6.2 too: the reference's rules send plain PEXPIRE there.
    for (name, url) in support::targets().into_iter().chain([support::oldest()]) {
        let store = support::caller_clock_store(&url, "ttl").await;
        let w = Duration::from_secs(10);
        let mut limits: Vec<Limit> = Algorithm::ALL.iter().map(|a| limit(*a, 5, w)).collect();
        limits.push(limit(
            Algorithm::SlidingWindow {
                precision: 10,
                edge: Edge::Strict,
            },
            5,
            w,
        ));
        for a in Algorithm::ALL {
            limits.push(
                Limit::builder(a, 3, w)
                    .count_rejected(true)
                    .build()
                    .unwrap(),
            );
        }
        let mut now = Timestamp::from_secs(1_800_000_000);
        for round in 0..40u64 {
            let k = Key::grouped("ttl", &format!(":user:{}", round % 4)).unwrap();
            let requests: Vec<Request<'_>> = limits
                .iter()
                .enumerate()
                .map(|(i, l)| Request::new(&k, l, (round + i as u64) % 4))
                .collect();
            store.check(&requests, now).await.unwrap();
            // The same key and limit twice in one batch.
            let twice = [
                Request::new(&k, &limits[0], 1),
                Request::new(&k, &limits[0], 2),
            ];
            store.check(&twice, now).await.unwrap();
            now = now.saturating_add(Duration::from_millis(700));
        }
        let keys = scan(&store, &format!("{}*", prefix_of(&store, &limits[0]))).await;
        assert!(keys.len() >= 12, "{name}: only {} keys", keys.len());
        for k in &keys {
            let ttl = int(&store, &["PTTL", k]).await;
            assert!(ttl > 0, "{name}: {k} has PTTL {ttl}");
        }
    }
}

/// The prefix part of a store's key names (everything before the hash tag).
fn prefix_of(store: &RedisStore, l: &Limit) -> String {
    let name = store.key_for(&key("x"), l, Timestamp::from_secs(0));
    name[..name.find('{').unwrap()].to_owned()
}

/// SCAN over every master (on Cluster, `SCAN` is routed to one node per call, so walk
/// the keys by their known names instead when clustered).
async fn scan(store: &RedisStore, pattern: &str) -> Vec<String> {
    if store.is_cluster() {
        // The test's keys are all in the key group `ttl`: one slot holds them all.
        let any = limit(Algorithm::Gcra, 1, Duration::from_secs(1));
        let probe = store.key_for(&key("ttl"), &any, Timestamp::from_secs(0));
        let mut keys = Vec::new();
        let slot = int(store, &["CLUSTER", "KEYSLOT", &probe]).await;
        let got = store
            .query(&cmd(&[
                "CLUSTER",
                "GETKEYSINSLOT",
                &slot.to_string(),
                "100000",
            ]))
            .await
            .unwrap();
        if let Value::Array(items) = got {
            for v in items {
                if let Value::BulkString(b) = v {
                    let k = String::from_utf8(b).unwrap();
                    if k.starts_with(&pattern[..pattern.len() - 1]) {
                        keys.push(k);
                    }
                }
            }
        }
        return keys;
    }
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let got = store
            .query(&cmd(&["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"]))
            .await
            .unwrap();
        let Value::Array(parts) = got else { panic!() };
        let [Value::BulkString(next), Value::Array(items)] = &parts[..] else {
            panic!("{parts:?}")
        };
        for v in items {
            if let Value::BulkString(b) = v {
                keys.push(String::from_utf8(b.clone()).unwrap());
            }
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            return keys;
        }
    }
}

/// A sliding window's state is 16 bytes while every count is in its newest bucket (the
/// short form: newest, total), then its ring. Either is written in place (SETRANGE:
/// its header and the counts a decision changed) once its key exists, and its TTL is
/// renewed exactly when the newest bucket moves: the stored bytes stay what a whole
/// write would store (the header's total is the sum of the counts, each count in its
/// bucket's slot), and the key never expires before the state is idle.
#[tokio::test]
async fn a_sliding_window_written_in_place_keeps_its_bytes_and_ttl() {
    for (name, url) in support::targets().into_iter().chain([support::oldest()]) {
        let store = support::caller_clock_store(&url, "in-place").await;
        // Ten buckets of 10 s: the state is idle 110 s after its newest bucket began.
        let l = ten_buckets();
        let k = key("in-place");
        let name_of = store.key_for(&k, &l, Timestamp::from_secs(0));
        let start = 1_800_000_000u64; // a multiple of 10 s: bucket 180,000,000 begins
        let bucket = start / 10;
        let at = |s: u64| Timestamp::from_secs(start + s);
        let check = |s: u64, cost: u64| {
            let store = &store;
            let l = &l;
            let k = &k;
            async move {
                let d = store
                    .check(&[Request::new(k, l, cost)], at(s))
                    .await
                    .unwrap();
                assert!(d.decisions[0].allowed(), "{name}: denied at +{s}s");
            }
        };
        let pttl_args = ["PTTL", name_of.as_str()];
        let pttl = || int(&store, &pttl_args);
        let get = || async {
            match store.query(&cmd(&["GET", &name_of])).await.unwrap() {
                Value::BulkString(b) => b,
                other => panic!("{name}: GET answered {other:?}"),
            }
        };
        let f =
            |raw: &[u8], i: usize| f64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().unwrap());

        // A new key, 4 s into bucket 0: the short form, idle in 110 − 4 s, plus the
        // caller's-clock margin of a second.
        check(4, 2).await;
        let first = pttl().await;
        assert!((102_000..=107_000).contains(&first), "{name}: PTTL {first}");
        // In place in the same bucket, 5 s on: still short, its TTL left as it was
        // (renewing it would give 110 − 9 s + 1 s = 102 s).
        check(9, 1).await;
        let short = get().await;
        assert_eq!(short.len(), 16, "{name}: the short form");
        assert_eq!(f(&short, 0), bucket as f64, "{name}: newest");
        assert_eq!(f(&short, 1), 3.0, "{name}: total");
        let kept = pttl().await;
        assert!(
            (106_000..=first).contains(&kept),
            "{name}: PTTL {kept} after {first}"
        );
        // Written whole, the newest bucket moved to 3 (two buckets hold counts: the
        // ring): idle in 140 − 30 s, renewed.
        check(30, 2).await;
        let moved = pttl().await;
        assert!((106_500..=111_000).contains(&moved), "{name}: PTTL {moved}");
        // In place in the same bucket, 9 s on: the TTL left as it was (renewing it
        // would give 140 − 39 s + 1 s = 102 s).
        check(39, 4).await;
        let same = pttl().await;
        assert!(
            (106_500..=moved).contains(&same),
            "{name}: PTTL {same} after {moved}"
        );

        // The bytes: newest, total, then 11 counts, the ring slot of bucket b at b % 11.
        let raw = get().await;
        assert_eq!(raw.len(), 16 + 8 * 11, "{name}");
        let counts: Vec<f64> = (0..11).map(|slot| f(&raw, 2 + slot)).collect();
        assert_eq!(f(&raw, 0), (bucket + 3) as f64, "{name}: newest");
        assert_eq!(f(&raw, 1), 9.0, "{name}: total");
        let slot = |b: u64| (b % 11) as usize;
        let mut want = vec![0.0; 11];
        want[slot(bucket)] = 3.0;
        want[slot(bucket + 3)] = 6.0;
        assert_eq!(counts, want, "{name}: counts");
    }
}

/// Sixteen bytes that are no sliding window's short form (a count of 0, NaN or a
/// fraction, a bucket below 0 or infinite) are refused, never read as a state, and left
/// as they were.
#[tokio::test]
async fn sixteen_bytes_that_are_not_a_short_form_are_refused() {
    let url = support::targets()[0].1.clone();
    let store = support::caller_clock_store(&url, "not-short").await;
    let l = ten_buckets();
    let k = key("not-short");
    let now = Timestamp::from_secs(1_800_000_000);
    let name_of = store.key_for(&k, &l, now);
    let bucket = 180_000_000.0;
    for (newest, total) in [
        (bucket, 0.0),
        (bucket, f64::NAN),
        (bucket, 2.5),
        (-1.0, 2.0),
        (f64::INFINITY, 2.0),
    ] {
        let bytes: Vec<u8> = [newest, total]
            .iter()
            .flat_map(|v: &f64| v.to_le_bytes())
            .collect();
        store
            .query(redis::cmd("SET").arg(&name_of).arg(&bytes))
            .await
            .unwrap();
        let err = store
            .check(&[Request::new(&k, &l, 1)], now)
            .await
            .expect_err("refused");
        assert!(
            err.to_string().contains("not state of its algorithm"),
            "({newest}, {total}): {err}"
        );
        let Value::BulkString(kept) = store.query(&cmd(&["GET", &name_of])).await.unwrap() else {
            panic!()
        };
        assert_eq!(kept, bytes, "({newest}, {total}): left as it was");
    }
    store.query(&cmd(&["DEL", &name_of])).await.unwrap();
}

/// A sliding window of 100 in 100 s, in ten buckets of 10 s.
fn ten_buckets() -> Limit {
    Limit::builder(
        Algorithm::SlidingWindow {
            precision: 10,
            edge: Edge::Interpolate,
        },
        100,
        Duration::from_secs(100),
    )
    .build()
    .unwrap()
}
