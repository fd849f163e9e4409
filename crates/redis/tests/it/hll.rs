//! The memory store's HyperLogLog is Redis's: for the same members, the same registers
//! byte for byte and the same count (`PFCOUNT`), sparse and dense, one key and merged.

use crate::support;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;
use spillway_core::algorithm::hll::{REGISTERS, Registers};
use spillway_redis::RedisStore;
use spillway_testkit::redis::standalone_url;

/// Redis's registers from the HLL string at `key` (header `HYLL`, encoding, 3 unused
/// bytes, 8 bytes of cached count; then 6-bit dense registers or sparse opcodes).
async fn registers(store: &RedisStore, key: &str) -> Vec<u8> {
    let Value::BulkString(raw) = store.query(redis::cmd("GET").arg(key)).await.unwrap() else {
        panic!("no HLL at {key}")
    };
    assert_eq!(&raw[..4], b"HYLL");
    let body = &raw[16..];
    let mut out = Vec::with_capacity(REGISTERS);
    if raw[4] == 0 {
        // Dense: register i in bits 6i .. 6i+6, little-endian.
        for i in 0..REGISTERS {
            let (byte, bit) = (i * 6 / 8, i * 6 % 8);
            let b0 = u16::from(body[byte]);
            let b1 = u16::from(body.get(byte + 1).copied().unwrap_or(0));
            out.push((((b0 >> bit) | (b1 << (8 - bit))) & 63) as u8);
        }
    } else {
        // Sparse: ZERO 00xxxxxx, XZERO 01xxxxxx yyyyyyyy, VAL 1vvvvvxx.
        let mut p = 0;
        while p < body.len() {
            let op = body[p];
            if op & 0xc0 == 0 {
                out.extend(std::iter::repeat_n(0, usize::from(op & 0x3f) + 1));
                p += 1;
            } else if op & 0xc0 == 0x40 {
                let run = (usize::from(op & 0x3f) << 8 | usize::from(body[p + 1])) + 1;
                out.extend(std::iter::repeat_n(0, run));
                p += 2;
            } else {
                let (value, run) = (((op >> 2) & 0x1f) + 1, usize::from(op & 3) + 1);
                out.extend(std::iter::repeat_n(value, run));
                p += 1;
            }
        }
    }
    assert_eq!(out.len(), REGISTERS, "{key}: {} registers", out.len());
    out
}

fn int(v: Value) -> u64 {
    match v {
        Value::Int(i) => i as u64,
        other => panic!("expected an integer, got {other:?}"),
    }
}

#[tokio::test]
async fn registers_and_counts_are_redis_own() {
    let store = support::caller_clock_store(&standalone_url(), "hll").await;
    let prefix = format!("hll-{}", std::process::id());
    let mut rng = StdRng::seed_from_u64(14);
    let mut ours = [Registers::default(), Registers::default()];
    let mut total = 0;
    for target in [1, 2, 3, 10, 100, 300, 1_000, 3_000, 10_000, 50_000] {
        // Members of every length 0 ..= 40, random bytes, split over two keys.
        while total < target {
            let mut cmds = [redis::cmd("PFADD"), redis::cmd("PFADD")];
            for (i, c) in cmds.iter_mut().enumerate() {
                c.arg(format!("{prefix}:{i}"));
            }
            for _ in 0..(target - total).min(1000) {
                let len = rng.random_range(0..=40);
                let member: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let side = usize::from(rng.random::<bool>());
                ours[side].add(&member);
                cmds[side].arg(member);
                total += 1;
            }
            for c in &cmds {
                store.query(c).await.unwrap();
            }
        }
        for (i, r) in ours.iter().enumerate() {
            let key = format!("{prefix}:{i}");
            assert_eq!(registers(&store, &key).await, r.values(), "{target}: {key}");
            let count = int(store.query(redis::cmd("PFCOUNT").arg(&key)).await.unwrap());
            assert_eq!(count, r.count(), "{target}: {key}");
        }
        let mut union = ours[0].clone();
        union.merge(&ours[1]);
        let keys = [format!("{prefix}:0"), format!("{prefix}:1")];
        let count = int(store
            .query(redis::cmd("PFCOUNT").arg(&keys[..]))
            .await
            .unwrap());
        assert_eq!(count, union.count(), "{target}: the union");
    }
    store
        .query(
            redis::cmd("DEL")
                .arg(format!("{prefix}:0"))
                .arg(format!("{prefix}:1")),
        )
        .await
        .unwrap();
}
