//! The memory store stays within `max_keys` under a flood of new keys, evicts the
//! least recently used, and reclaims expired state.

use std::time::Duration;

use spillway_core::{Algorithm, Key, Limit, MemoryStore, Request, Timestamp};

const T0: u64 = 1_702_080_000_000_000;

fn at(us: u64) -> Timestamp {
    Timestamp::from_micros(T0 + us)
}

#[test]
fn a_flood_of_new_keys_stays_within_max_keys_and_spares_the_hot_key() {
    let store = MemoryStore::builder().max_keys(4096).build();
    assert_eq!(store.max_keys(), 4096);
    let limit = Limit::new(Algorithm::FixedWindow, 5, Duration::from_secs(3600)).unwrap();
    let hot = Key::new("hot").unwrap();
    // The hot key spends its whole limit first.
    for _ in 0..5 {
        assert!(
            store
                .decide_one(Request::new(&hot, &limit, 1), at(0))
                .unwrap()
                .allowed()
        );
    }
    for i in 0..200_000u64 {
        let ip = Key::new(format!("ip:{i}")).unwrap();
        store
            .decide_one(Request::new(&ip, &limit, 1), at(i))
            .unwrap();
        if i % 100 == 0 {
            // Still hammered (and denied) while the flood runs: recently used, never evicted.
            let d = store
                .decide_one(Request::new(&hot, &limit, 1), at(i))
                .unwrap();
            assert!(!d.allowed(), "hot key forgot its count after {i} new keys");
        }
        if i % 1000 == 0 {
            assert!(store.len() <= 4096, "{} keys held", store.len());
        }
    }
    assert!(store.len() <= store.max_keys());
}

#[test]
fn expired_state_is_reclaimed() {
    let store = MemoryStore::builder()
        .max_keys(10_000)
        .sweep_interval(Duration::from_secs(3600))
        .build();
    let limit = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(1)).unwrap();
    for i in 0..1000 {
        let key = Key::new(format!("k{i}")).unwrap();
        store
            .decide_one(Request::new(&key, &limit, 1), at(0))
            .unwrap();
    }
    assert_eq!(store.len(), 1000);
    // One unit of GCRA at 10/s is restored 100 ms later; before that nothing is expired.
    assert_eq!(store.purge_expired(at(99_999)), 0);
    assert_eq!(store.purge_expired(at(100_000)), 1000);
    assert!(store.is_empty());
}

#[test]
fn inserting_sweeps_expired_keys_once_per_interval() {
    let store = MemoryStore::builder()
        .max_keys(1000)
        .shards(1)
        .sweep_interval(Duration::from_secs(1))
        .build();
    let limit = Limit::new(Algorithm::TokenBucket, 10, Duration::from_secs(1)).unwrap();
    for i in 0..500 {
        let key = Key::new(format!("k{i}")).unwrap();
        store
            .decide_one(Request::new(&key, &limit, 1), at(0))
            .unwrap();
    }
    // 2 s later every bucket is full again; the next insert sweeps them away.
    let fresh = Key::new("fresh").unwrap();
    store
        .decide_one(Request::new(&fresh, &limit, 1), at(2_000_000))
        .unwrap();
    assert_eq!(store.len(), 1);
}

#[test]
fn denied_requests_for_unknown_keys_store_nothing() {
    let store = MemoryStore::new();
    let limit = Limit::new(Algorithm::SlidingLog, 3, Duration::from_secs(1)).unwrap();
    let key = Key::new("k").unwrap();
    let too_big = store
        .decide_one(Request::new(&key, &limit, 4), at(0))
        .unwrap();
    assert!(!too_big.allowed());
    store
        .decide_one(Request::new(&key, &limit, 0), at(0))
        .unwrap();
    assert!(
        store.is_empty(),
        "peeks and impossible costs must not create state"
    );
}

#[test]
fn invalid_requests_are_refused_before_any_state_is_touched() {
    let store = MemoryStore::new();
    let limit = Limit::new(Algorithm::Gcra, 3, Duration::from_secs(1)).unwrap();
    let key = Key::new("k").unwrap();
    let err = store
        .decide_one(Request::new(&key, &limit, u64::MAX), at(0))
        .unwrap_err();
    assert!(
        err.is_invalid_input() && err.to_string().contains("2^53"),
        "{err}"
    );
    let many: Vec<Request<'_>> = (0..65).map(|_| Request::new(&key, &limit, 1)).collect();
    assert!(
        store
            .decide(&many, at(0))
            .unwrap_err()
            .to_string()
            .contains("the most is 64")
    );
    assert!(store.is_empty());
}

/// Issue #37: the bound used to count keys only, whatever each cost. A key's state can
/// be large (`sliding_window` of precision 10,000: 80 KB), so a flood of such keys grew
/// the store by that much a key up to a million keys. It is also bounded in bytes: 1,000
/// such keys against 8 MiB keep the store within 8 MiB (plus one state per shard, which
/// may grow in place before the shard's next insert), and the count of bytes is the sum
/// of the keys' footprints.
#[test]
fn heavy_states_are_bounded_in_bytes_and_the_count_is_exact() {
    let max = 8 << 20;
    let store = MemoryStore::builder().max_bytes(max).shards(4).build();
    assert_eq!(store.max_bytes(), max);
    let limit = Limit::new(
        Algorithm::SlidingWindow {
            precision: 10_000,
            edge: spillway_core::algorithm::Edge::default(),
        },
        100,
        Duration::from_secs(3600),
    )
    .unwrap();
    let mut keys = Vec::new();
    let mut peak = 0;
    for i in 0..1_000u64 {
        let key = Key::new(format!("heavy:{i}")).unwrap();
        assert!(
            store
                .decide_one(Request::new(&key, &limit, 1), at(i))
                .unwrap()
                .allowed()
        );
        peak = peak.max(store.bytes());
        keys.push(key);
    }
    let one = keys.iter().rev().find_map(|k| store.footprint(k)).unwrap();
    assert!(one > 70_000, "a key of precision 10,000 is {one} bytes");
    assert!(peak <= max + 4 * one, "peak {peak} bytes against {max}");
    assert!(store.len() < 200, "{} keys held", store.len());
    let counted: usize = keys.iter().filter_map(|k| store.footprint(k)).sum();
    assert_eq!(store.bytes(), counted);
    // Expired, swept: nothing left, and the count says so.
    store.purge_expired(at(10_000_000_000));
    assert_eq!((store.len(), store.bytes()), (0, 0));
}

/// A sweep reads every entry of its shard: once an interval has passed, a shard sweeps
/// only when a sixteenth of its entries are new since its last sweep, so a large shard
/// taking few inserts does not read itself whole on each.
#[test]
fn a_shard_sweeps_only_once_a_sixteenth_of_it_is_new() {
    let store = MemoryStore::builder()
        .max_keys(100_000)
        .shards(1)
        .sweep_interval(Duration::from_secs(1))
        .build();
    let long = Limit::new(Algorithm::FixedWindow, 10, Duration::from_secs(3600)).unwrap();
    let short = Limit::new(Algorithm::TokenBucket, 10, Duration::from_secs(1)).unwrap();
    let check = |name: String, limit: &Limit, t: u64| {
        let key = Key::new(name).unwrap();
        store
            .decide_one(Request::new(&key, limit, 1), at(t))
            .unwrap();
    };
    for i in 0..1600 {
        check(format!("long{i}"), &long, 0);
    }
    // Past the interval, the first insert sweeps (1,600 new since the last): nothing has
    // expired. The short keys' buckets are full again 1 s later.
    for i in 0..50 {
        check(format!("short{i}"), &short, 1_500_000);
    }
    assert_eq!(store.len(), 1650);
    // At 3 s the 50 short keys are expired, but few entries are new since the sweep:
    // the first insert past the interval no longer sweeps.
    check("later0".into(), &long, 3_000_000);
    assert_eq!(store.len(), 1651);
    // Once a sixteenth of the shard is new since the sweep (the 49 short ones inserted
    // after it count too), one does: within 1,650 / 16 new entries.
    let mut swept_at = None;
    for i in 1..104 {
        check(format!("later{i}"), &long, 3_000_000);
        if store.len() < 1651 + i {
            swept_at = Some(i);
            break;
        }
    }
    let i = swept_at.expect("swept within a sixteenth");
    assert!(49 + i + 1 >= 1650 / 16, "swept after {i}: too early");
    assert_eq!(store.len(), 1600 + i + 1, "the 50 expired are gone");
}
