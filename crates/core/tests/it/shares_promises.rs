//! The promises of `shares` (docs/algorithms.md), on random trees and random traffic
//! over a manual clock, checked against a model of each promise:
//! - the parent admits no more than its GCRA bound (burst + rate), counted when each
//!   request goes ahead (after its wait);
//! - a child admits no more than its ceiling's GCRA bound plus its guaranteed burst
//!   and what its ceiling admits in `max_wait`;
//! - a child that asks within its guarantee (a model GCRA at its rate and burst, kept
//!   here) is always admitted at once, whatever its siblings do;
//! - no wait passes `max_wait`;
//! - the memory store decides as the pure algorithm does.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use spillway_core::algorithm::shares::{self, Share, Shares};
use spillway_core::{Algorithm, Key, Limit, MemoryStore, Request, State, Store, Timestamp};

const T0: u64 = 1_702_080_000_000_000;
const WINDOW: u64 = 1_000_000;

/// A child's numbers: (rate, ceil, weight, burst).
type Child = (u64, u64, u64, u64);

/// Who asks in a step: (child index, level, cost).
type Ask = (usize, u8, u64);

#[derive(Clone, Debug)]
struct Case {
    limit: Limit,
    n: u64,
    burst: u64,
    wait: u64,
    children: Vec<Child>,
    /// Per step: µs to advance, then who asks (child index, level, cost).
    steps: Vec<(u64, Vec<Ask>)>,
}

fn case() -> impl Strategy<Value = Case> {
    let child = (0u64..4, 1u64..6, 1u64..4, 1u64..4);
    (
        10u64..120,
        prop::collection::vec(child, 2..4),
        1u8..4,
        prop_oneof![Just(0u64), 1u64..200_000],
        1u64..4,
    )
        .prop_filter_map("a valid tree", |(n, raw, levels, wait, b)| {
            let children: Vec<Child> = raw
                .into_iter()
                .map(|(rate, ceil, weight, burst)| {
                    (n * rate / 10, (n * ceil / 5).max(1), weight, burst)
                })
                .collect();
            let mut s = Shares::new().priorities(levels, 150);
            for (i, &(rate, ceil, weight, burst)) in children.iter().enumerate() {
                s = s.child(
                    format!("c{i}"),
                    Share::new(rate, ceil).weight(weight).burst(burst),
                );
            }
            let burst = n * b / 2 + 1;
            let limit = Limit::builder(Algorithm::Shares, n, Duration::from_micros(WINDOW))
                .burst(burst)
                .max_wait(Duration::from_micros(wait))
                .shares(s)
                .build()
                .ok()?;
            Some((limit, n, burst, wait, children))
        })
        .prop_flat_map(|(limit, n, burst, wait, children)| {
            let k = children.len();
            let ask = (0..k, 0u8..4, prop_oneof![8 => Just(1u64), 1 => 0u64..4]);
            let step = (
                prop_oneof![3 => Just(0u64), 6 => 0u64..30_000, 1 => 0u64..1_500_000],
                prop::collection::vec(ask, 0..6),
            );
            (
                Just((limit, n, burst, wait, children)),
                prop::collection::vec(step, 20..400),
            )
        })
        .prop_map(|((limit, n, burst, wait, children), steps)| Case {
            limit,
            n,
            burst,
            wait,
            children,
            steps,
        })
}

/// The most admitted (by cost) over any interval, against `per × Δ / W + allowance`:
/// a GCRA's bound (τ = burst × W / rate) as proptests.rs checks it.
fn within_gcra(went: &[(u64, u64)], rate: u64, burst: u64, wait: u64) -> Result<(), String> {
    let tau =
        (u128::from(burst) * u128::from(WINDOW)).div_ceil(u128::from(rate)) + u128::from(wait);
    for i in 0..went.len() {
        let mut sum = 0u128;
        for &(t, c) in &went[i..] {
            sum += u128::from(c);
            let delta = u128::from(t - went[i].0);
            if sum * u128::from(WINDOW) > (delta + tau) * u128::from(rate) {
                return Err(format!("{sum} went ahead over {delta}µs"));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn shares_keep_their_promises(case in case()) {
        let Case { limit, n, burst, wait, children, steps } = case;
        let mut state = State::new();
        let store = MemoryStore::new();
        let key = Key::new("tree").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut now = T0;
        // Per child: what went ahead (go time, cost); the model of its guarantee's TAT.
        let mut went: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
        let mut guarantee = vec![0u64; children.len()];
        for (advance, asks) in steps {
            now += advance;
            // Child 0 asks within its guarantee when its model says it may.
            let (rate0, _, _, burst0) = children[0];
            let mut asks = asks;
            let mut guaranteed_ask = None;
            if rate0 > 0 {
                let e = WINDOW.div_ceil(rate0);
                let tau = (burst0 * WINDOW).div_ceil(rate0);
                let tat = guarantee[0].max(now) + e;
                if tat - now <= tau {
                    guarantee[0] = tat;
                    guaranteed_ask = Some(asks.len());
                    asks.push((0, 3, 1));
                }
            }
            for (i, (child, level, cost)) in asks.into_iter().enumerate() {
                // Child 0 asks only within its guarantee.
                if child == 0 && Some(i) != guaranteed_ask {
                    continue;
                }
                let member = shares::member(&format!("c{child}"), level);
                let at = Timestamp::from_micros(now);
                let (d, _) = limit.decide(&mut state, at, cost, &member);
                let stored = rt
                    .block_on(store.check_one(Request::new(&key, &limit, cost).with_member(&member), at))
                    .unwrap();
                prop_assert_eq!(d, stored, "the store and the algorithm");
                let w = d.wait.as_micros() as u64;
                prop_assert!(w <= wait, "a wait of {}µs past {}µs", w, wait);
                if Some(i) == guaranteed_ask {
                    prop_assert!(d.allowed() && w == 0, "a guaranteed request: {:?}", d);
                }
                if d.allowed() && cost > 0 {
                    went.entry(child).or_default().push((now + w, cost));
                }
            }
        }
        let mut all: Vec<(u64, u64)> = went.values().flatten().copied().collect();
        all.sort_unstable();
        within_gcra(&all, n, burst, 0).map_err(|e| TestCaseError::fail(format!("parent: {e}")))?;
        for (child, mut mine) in went {
            let (_, ceil, _, b) = children[child];
            mine.sort_unstable();
            // A ceiling's bound, plus a guaranteed burst and what the ceiling admits in
            // the longest wait: a guaranteed request goes at once, before the child's
            // borrowers that wait (their slots in the ceiling were taken first).
            within_gcra(&mine, ceil, 2 * b, wait)
                .map_err(|e| TestCaseError::fail(format!("child {child}: {e}")))?;
        }
    }
}
