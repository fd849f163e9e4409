//! `shares` trees, the Lua twin against the Rust: random trees (guarantees, ceilings,
//! weights, bursts, priorities, waits) decided with a `gcra` limit in the same batches
//! (all or nothing, and the marks a denied borrower leaves), children listed and not,
//! priorities in range and past it, on every store.

use super::{Charge, Step, check_equal_with, runtime};
use crate::support;

use std::time::Duration;

use proptest::prelude::*;
use spillway_core::algorithm::shares::{self, Share, Shares};
use spillway_core::{Algorithm, Limit};

fn tree() -> impl Strategy<Value = Limit> {
    let child = (0u64..4, 1u64..5, 1u64..4, 1u64..4);
    (
        20u64..200,
        prop::collection::vec(child, 1..4),
        1u8..4,
        prop::sample::select(vec![100u64, 200, 300]),
        prop_oneof![Just(0u64), 0u64..300_000],
        0u64..3,
    )
        .prop_filter_map(
            "a tree that keeps its promises",
            |(n, children, levels, reserve, wait, burst)| {
                let mut s = Shares::new().priorities(levels, reserve);
                for (i, (rate, ceil, weight, b)) in children.into_iter().enumerate() {
                    // Rates in tenths of the parent's, ceilings in fifths.
                    let share = Share::new(n * rate / 10, (n * ceil / 5).max(1))
                        .weight(weight)
                        .burst(b);
                    s = s.child(["a", "b", "c"][i], share);
                }
                Limit::builder(Algorithm::Shares, n, Duration::from_secs(1))
                    .burst(n / 2 + burst * n / 2)
                    .max_wait(Duration::from_micros(wait))
                    .shares(s)
                    .build()
                    .ok()
            },
        )
}

#[test]
fn shares_on_redis_decide_as_the_memory_store() {
    let pool: Vec<Vec<u8>> = ["a", "b", "c", "unlisted"]
        .iter()
        .flat_map(|c| (0..4).map(move |level| shares::member(c, level)))
        .collect();
    let members: Vec<&[u8]> = pool.iter().map(Vec::as_slice).collect();
    let gcra = (5u64..100).prop_map(|n| {
        Limit::builder(Algorithm::Gcra, n, Duration::from_secs(1))
            .burst(n / 4 + 1)
            .build()
            .unwrap()
    });
    let step = (
        prop_oneof![4 => Just(0u64), 6 => 0u64..20_000, 1 => 0u64..2_000_000],
        prop::collection::vec(
            (
                0usize..3,
                0usize..2,
                prop_oneof![6 => Just(1u64), 1 => 0u64..5],
                0..pool.len(),
                Just(Charge::Check),
            ),
            1..4,
        ),
    )
        .prop_map(|(advance, batch)| Step { advance, batch });
    let rt = runtime();
    let (denied, waited) = (
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    );
    for url in [
        spillway_testkit::redis::standalone_url(),
        spillway_testkit::redis::cluster_url(),
        spillway_testkit::redis::valkey_url(),
    ] {
        let store = rt.block_on(support::caller_clock_store(&url, "shares"));
        let case = std::sync::atomic::AtomicU64::new(0);
        proptest!(ProptestConfig::with_cases(super::cases() / 10 + 1), |(
            trees in prop::collection::vec(tree(), 2),
            gcra in gcra.clone(),
            steps in prop::collection::vec(step.clone(), 50..300),
        )| {
            let limits = [trees[0].clone(), trees[1].clone(), gcra];
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let compared = check_equal_with(&rt, &store, n, &limits, &steps, &members)?;
            denied.fetch_add(compared.denied, std::sync::atomic::Ordering::Relaxed);
            waited.fetch_add(compared.waited, std::sync::atomic::Ordering::Relaxed);
        });
    }
    // The sequences reach the trees' limits and their waits: both were compared.
    let (denied, waited) = (denied.into_inner(), waited.into_inner());
    eprintln!("{denied} denials, {waited} waits compared");
    assert!(
        denied > 100 && waited > 10,
        "too few denials or waits to compare"
    );
}
