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
