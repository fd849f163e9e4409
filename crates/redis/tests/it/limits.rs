//! The largest parameters validation accepts decide on every store, as the memory
//! store (the specification) decides them. Issue #37 (8): a `sliding_window` of
//! precision 8,000 or 10,000 was accepted by `validate` and failed every decision on
//! Redis ("too many results to unpack": Lua 5.1 passes at most about 8,000 values at
//! once). The largest sketched `distinct` limit, 10,000,000, too.

use crate::support;

use std::time::Duration;

use spillway_core::{Algorithm, Edge, Key, Limit, MAX_PRECISION, MemoryStore, Request, Store};
use spillway_core::{Timestamp, algorithm::distinct};

/// Charges at these offsets (ms) and costs, across two windows of 10 s.
const STEPS: [(u64, u64); 12] = [
    (0, 1),
    (1, 2),
    (2_500, 1),
    (5_000, 3),
    (9_999, 1),
    (10_000, 1),
    (10_001, 2),
    (12_345, 1),
    (15_000, 4),
    (19_999, 1),
    (20_002, 1),
    (31_000, 2),
];

fn largest() -> Vec<Limit> {
    let window = Duration::from_secs(10); // 1 ms sub-buckets at precision 10,000
    let mut limits: Vec<Limit> = [Edge::Interpolate, Edge::Strict, Edge::Lenient]
        .into_iter()
        .map(|edge| {
            let algorithm = Algorithm::SlidingWindow {
                precision: MAX_PRECISION,
                edge,
            };
            Limit::new(algorithm, 5, window).expect("the largest precision is valid")
        })
        .collect();
    let distinct = Algorithm::Distinct {
        precision: distinct::MAX_PRECISION,
    };
    // 60 sub-buckets of 200 ms.
    let twelve = Duration::from_secs(12);
    limits.push(Limit::new(distinct, 3, twelve).expect("the largest precision is valid"));
    // And the largest sketched limit (its filters as large as filters get: 12.5 MB each,
    // grown a block at a time), at the largest precision.
    limits.push(
        Limit::new(distinct, distinct::MAX_LIMIT, twelve).expect("the largest limit is valid"),
    );
    limits
}

#[test]
fn the_largest_precisions_decide_on_every_store_as_in_memory() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let limits = largest();
    for (name, url) in support::topologies() {
        let store = rt.block_on(support::caller_clock_store(&url, "largest"));
        let memory = MemoryStore::new();
        for (l, limit) in limits.iter().enumerate() {
            let key = Key::grouped(&format!("largest{l}"), ":k").unwrap();
            let start = Timestamp::from_secs(1_800_000_000);
            for (i, &(at, cost)) in STEPS.iter().enumerate() {
                let now = start.saturating_add(Duration::from_millis(at));
                let cost = if limit.algorithm().counts_members() {
                    cost.min(1)
                } else {
                    cost
                };
                let member = format!("m{i}");
                let request = [Request::new(&key, limit, cost).with_member(member.as_bytes())];
                let want = rt.block_on(memory.check(&request, now)).unwrap();
                let got = rt
                    .block_on(store.check(&request, now))
                    .unwrap_or_else(|e| panic!("{name}: {:?} at {at} ms: {e}", limit.algorithm()));
                assert_eq!(got, want, "{name}: {:?} at {at} ms", limit.algorithm());
            }
        }
    }
}
