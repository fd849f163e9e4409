//! Sketched `distinct` limits on Redis: a ring of HyperLogLog keys beside the state
//! key, each with a TTL, untouched by a check that does not charge, gone on reset, and
//! a foreign value in the ring failing its batch without writing. (Their decisions
//! are compared with the memory store's in `differential.rs`.)

use crate::support;

use std::time::Duration;

use redis::Value;
use spillway_core::algorithm::distinct::EXACT_MAX;
use spillway_core::{Algorithm, Key, Limit, Request, Store, Timestamp};
use spillway_redis::RedisStore;
use support::{cmd, int, targets};

const LIMIT: u64 = EXACT_MAX + 20;

fn sketched(precision: u32) -> Limit {
    Limit::new(
        Algorithm::Distinct { precision },
        LIMIT,
        Duration::from_secs(60),
    )
    .unwrap()
}

/// A key's bytes: a string's, or a filter's blocks (a hash) field by field.
async fn bytes(store: &RedisStore, key: &str) -> Option<Vec<u8>> {
    let kind = store.query(&cmd(&["TYPE", key])).await.unwrap();
    if kind == Value::SimpleString("hash".into()) {
        let Value::Array(items) = store.query(&cmd(&["HGETALL", key])).await.unwrap() else {
            panic!("HGETALL {key}");
        };
        let mut pairs: Vec<Vec<u8>> = items
            .chunks(2)
            .map(|p| match (&p[0], &p[1]) {
                (Value::BulkString(f), Value::BulkString(v)) => [f.as_slice(), v].concat(),
                other => panic!("HGETALL {key}: {other:?}"),
            })
            .collect();
        pairs.sort();
        return Some(pairs.concat());
    }
    match store.query(&cmd(&["GET", key])).await.unwrap() {
        Value::BulkString(b) => Some(b),
        Value::Nil => None,
        other => panic!("GET {key} answered {other:?}"),
    }
}

/// A key's bytes, past the 16-byte header for an HLL.
async fn registers(store: &RedisStore, key: &str) -> Option<Vec<u8>> {
    let b = bytes(store, key).await?;
    Some(if b.starts_with(b"HYLL") {
        b[16..].to_vec()
    } else {
        b
    })
}

async fn decide(
    store: &RedisStore,
    key: &Key,
    limit: &Limit,
    now: Timestamp,
    member: &str,
    cost: u64,
) -> bool {
    let request = Request::new(key, limit, cost).with_member(member.as_bytes());
    store.check(&[request], now).await.unwrap().allowed()
}

#[tokio::test]
async fn the_ring_has_ttls_checks_write_nothing_and_reset_clears_it() {
    for (target, url) in targets() {
        let store = support::caller_clock_store(&url, "sketch").await;
        let (key, limit) = (Key::new("api-key-1").unwrap(), sketched(3));
        let state = store.key_for(&key, &limit, Timestamp::from_secs(0));
        let ring: Vec<String> = (0..3).map(|i| format!("{state}:{i}")).collect();
        let filters: Vec<String> = (0..3).map(|i| format!("{state}:f{i}")).collect();
        // Sub-window 20s wide; start in slot 0 (1,800,000,000 s is a multiple of 60).
        let mut now = Timestamp::from_secs(1_800_000_000);
        let mut admitted = 0;
        for i in 0..LIMIT * 2 {
            admitted += u64::from(decide(&store, &key, &limit, now, &format!("10.{i}"), 1).await);
        }
        // The count never passes the limit; the count is an estimate, so a member or
        // two more or fewer than the limit may be admitted.
        let count = int(&store, &["PFCOUNT", &ring[0]]).await as u64;
        assert!(
            (LIMIT - 2..=LIMIT).contains(&count),
            "{target}: count {count}"
        );
        assert!(
            (LIMIT..LIMIT + 10).contains(&admitted),
            "{target}: {admitted}"
        );
        now = now.saturating_add(Duration::from_secs(20));
        assert!(
            decide(&store, &key, &limit, now, "10.0", 1).await,
            "{target}: seen"
        );
        for k in [&state, &ring[0], &ring[1], &filters[0], &filters[1]] {
            let ttl = int(&store, &["PTTL", k]).await;
            assert!(ttl > 0 && ttl <= 61_000, "{target}: {k} ttl {ttl}");
        }
        assert_eq!(
            int(&store, &["EXISTS", &ring[2], &filters[2]]).await,
            0,
            "{target}"
        );

        // A denied member and a peek leave every key as it was, TTL included (an HLL's
        // registers: PFCOUNT caches its count in the header's last 8 bytes).
        let keys = [&state, &ring[0], &ring[1], &filters[0], &filters[1]];
        let mut before = Vec::new();
        for k in keys {
            before.push(registers(&store, k).await);
        }
        let ttl = int(&store, &["PTTL", &ring[1]]).await;
        assert!(
            !decide(&store, &key, &limit, now, "new-one", 1).await,
            "{target}: full"
        );
        decide(&store, &key, &limit, now, "another", 0).await;
        for (k, b) in keys.iter().zip(&before) {
            assert_eq!(&registers(&store, k).await, b, "{target}: {k} changed");
        }
        assert!(
            int(&store, &["PTTL", &ring[1]]).await <= ttl,
            "{target}: ttl kept"
        );

        store.reset(&key, &limit, now).await.unwrap();
        for k in std::iter::once(&state).chain(&ring).chain(&filters) {
            assert_eq!(int(&store, &["EXISTS", k]).await, 0, "{target}: {k} reset");
        }
    }
}

#[tokio::test]
async fn a_foreign_value_in_the_ring_fails_the_batch_and_writes_nothing() {
    for (target, url) in targets() {
        let store = support::caller_clock_store(&url, "sketch-foreign").await;
        let (key, limit) = (Key::new("k").unwrap(), sketched(2));
        let now = Timestamp::from_secs(1_800_000_000);
        assert!(decide(&store, &key, &limit, now, "a", 1).await);
        let state = store.key_for(&key, &limit, now);
        let ring0 = format!("{state}:0");
        let kept = registers(&store, &ring0).await;
        // The other slot holds another program's value; the next sub-window uses it.
        store
            .query(&cmd(&["SET", &format!("{state}:1"), "not an hll"]))
            .await
            .unwrap();
        let next = now.saturating_add(Duration::from_secs(30));
        let request = Request::new(&key, &limit, 1).with_member(b"b");
        let err = store.check(&[request], next).await.unwrap_err();
        assert!(err.to_string().contains("HyperLogLog"), "{target}: {err}");
        assert_eq!(registers(&store, &ring0).await, kept, "{target}: ring kept");
        store
            .query(&cmd(&["DEL", &format!("{state}:1")]))
            .await
            .unwrap();
        assert!(
            decide(&store, &key, &limit, next, "b", 1).await,
            "{target}: then decided"
        );
    }
}

/// Issue #37: a sketched filter used to be allocated whole for every new group (12.5 MB
/// of Redis memory for a limit of 10,000,000, 1.3 MB for 1,000,000), so a client that
/// invents API keys grew Redis by that much a request. Blocks are now added as members
/// set bits: 1,000 invented keys with one member each on a limit of 1,000,000 cost a
/// few hundred bytes a group (`MEMORY USAGE` of every key of the group).
#[tokio::test]
async fn an_invented_group_costs_redis_a_block_not_the_whole_filter() {
    for (target, url) in targets() {
        let store = support::caller_clock_store(&url, "sketch-invented").await;
        let limit = Limit::new(
            Algorithm::Distinct { precision: 2 },
            1_000_000,
            Duration::from_secs(60),
        )
        .unwrap();
        let now = Timestamp::from_secs(1_800_000_000);
        let groups = 1_000;
        let mut bytes_used = 0i64;
        for g in 0..groups {
            let key = Key::new(format!("invented-{g}")).unwrap();
            assert!(decide(&store, &key, &limit, now, "10.0.0.1", 1).await);
            let state = store.key_for(&key, &limit, now);
            let mut keys = vec![state.clone()];
            keys.extend(spillway_redis::ring_keys(&state, &limit));
            for k in &keys {
                match store.query(&cmd(&["MEMORY", "USAGE", k])).await.unwrap() {
                    Value::Int(n) => bytes_used += n,
                    Value::Nil => {}
                    other => panic!("MEMORY USAGE {k}: {other:?}"),
                }
            }
        }
        let per_group = bytes_used / groups;
        println!("{target}: {per_group} bytes of Redis memory per invented group");
        assert!(
            per_group <= 64 * 1024,
            "{target}: {per_group} bytes a group"
        );
        assert!(per_group <= 2048, "{target}: {per_group} bytes a group");
    }
}
