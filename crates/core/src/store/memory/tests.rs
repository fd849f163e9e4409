//! The compact entries against a plain map of states: on random traffic over keys used
//! with several limit shapes (some inline, some out of line, some whose numbers
//! outgrow the inline form), single requests and batches, clears and a clock that
//! steps back, the store decides exactly as the map does.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use super::MemoryStore;
use crate::algorithm::State;
use crate::limit::Shape;
use crate::store::Request;
use crate::store::round::{self, Slots};
use crate::{Algorithm, BatchDecision, Decision, Key, Limit, Timestamp};

/// What the store must behave as: every (key, shape)'s state in a map.
#[derive(Default)]
struct Model(HashMap<(Key, Shape), State>);

struct ModelBatch<'a> {
    states: &'a mut HashMap<(Key, Shape), State>,
    requests: &'a [Request<'a>],
}

impl Slots for ModelBatch<'_> {
    fn get(&self, i: usize) -> Option<&State> {
        let r = &self.requests[i];
        self.states.get(&(r.key.clone(), r.limit.shape()))
    }

    fn get_mut(&mut self, i: usize) -> &mut State {
        let r = &self.requests[i];
        self.states
            .entry((r.key.clone(), r.limit.shape()))
            .or_default()
    }

    fn charged(&mut self, _: usize) {}
}

impl Model {
    fn decide_one(&mut self, r: Request<'_>, now: Timestamp) -> Decision {
        let slot = (r.key.clone(), r.limit.shape());
        let mut state = self.0.get(&slot).cloned().unwrap_or_default();
        let (decision, idle) = r.limit.decide(&mut state, now, r.cost, r.member_bytes());
        if idle.is_some() {
            self.0.insert(slot, state);
        }
        decision
    }

    fn decide(&mut self, requests: &[Request<'_>], now: Timestamp) -> BatchDecision {
        let mut slots = ModelBatch {
            states: &mut self.0,
            requests,
        };
        round::decide(&mut slots, requests, now)
    }
}

/// Limits whose states pack, and some that never do or outgrow it.
fn limits() -> Vec<Limit> {
    let secs = Duration::from_secs;
    let built = |a, l, w, burst: Option<u64>| {
        let mut b = Limit::builder(a, l, w);
        if let Some(burst) = burst {
            b = b.burst(burst);
        }
        b.build().unwrap()
    };
    vec![
        built(Algorithm::Gcra, 5, secs(1), Some(3)),
        built(Algorithm::FixedWindow, 6, secs(1), None),
        // Counts past 2^32 after a few charges of 2^31: out of line from then on.
        built(Algorithm::FixedWindow, 1 << 40, secs(1), None),
        built(Algorithm::TokenBucket, 4, secs(1), Some(4)),
        // A day's window makes a unit 8.64e10 scaled: the level never packs.
        built(Algorithm::TokenBucket, 1, secs(86_400), Some(100)),
        built(Algorithm::SlidingLog, 3, secs(1), None),
        Limit::builder(Algorithm::Gcra, 5, secs(1))
            .burst(3)
            .count_rejected(true)
            .build()
            .unwrap(),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    One { key: usize, limit: usize, cost: u8 },
    Batch(Vec<(usize, usize, u8)>),
    Clear { key: usize, limit: usize },
}

fn arb_op(limits: usize) -> impl Strategy<Value = Op> {
    let part = (0usize..3, 0..limits, 0u8..4);
    prop_oneof![
        6 => part.clone().prop_map(|(key, limit, cost)| Op::One { key, limit, cost }),
        3 => prop::collection::vec(part, 2..5).prop_map(Op::Batch),
        1 => (0usize..3, 0..limits).prop_map(|(key, limit)| Op::Clear { key, limit }),
    ]
}

/// A limit's cost: `cost` units, or 2^31 of them for the limits sized for it.
fn units(limit: &Limit, cost: u8) -> u64 {
    if limit.limit() >= 1 << 40 {
        u64::from(cost) << 31
    } else {
        u64::from(cost)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn compact_entries_decide_as_a_map_of_states(
        start in prop_oneof![Just(1_702_080_000_000_000u64), Just((1u64 << 53) - 2_000_000)],
        ops in prop::collection::vec((arb_op(limits().len()), -300_000i64..700_000), 1..80),
    ) {
        let limits = limits();
        let keys: Vec<Key> = (0..3).map(|i| Key::new(format!("k{i}")).unwrap()).collect();
        // No sweeps: a sweep drops state idle by the time it runs, which a clock that then
        // steps back would read (the map keeps it). Sweeps have their own tests.
        let store = MemoryStore::builder().sweep_interval(Duration::from_secs(1 << 40)).build();
        let mut model = Model::default();
        let mut t = start;
        for (op, step) in ops {
            t = t.saturating_add_signed(step);
            let now = Timestamp::from_micros(t);
            match op {
                Op::One { key, limit, cost } => {
                    let l = &limits[limit];
                    let r = Request::new(&keys[key], l, units(l, cost));
                    prop_assert_eq!(store.decide_one(r, now).unwrap(), model.decide_one(r, now));
                }
                Op::Batch(parts) => {
                    let requests: Vec<Request<'_>> = parts
                        .iter()
                        .map(|&(key, limit, cost)| {
                            let l = &limits[limit];
                            Request::new(&keys[key], l, units(l, cost))
                        })
                        .collect();
                    let got = store.decide(&requests, now).unwrap();
                    let want = model.decide(&requests, now);
                    prop_assert_eq!(got.decisions, want.decisions);
                    prop_assert_eq!(got.denied_by, want.denied_by);
                }
                Op::Clear { key, limit } => {
                    store.clear(&keys[key], &limits[limit]);
                    model.0.remove(&(keys[key].clone(), limits[limit].shape()));
                }
            }
        }
        // Every state, looked at once more.
        let now = Timestamp::from_micros(t);
        for key in &keys {
            for l in &limits {
                let r = Request::new(key, l, 0);
                prop_assert_eq!(store.decide_one(r, now).unwrap(), model.decide_one(r, now));
            }
        }
    }
}

#[test]
fn an_entry_is_24_bytes() {
    assert_eq!(std::mem::size_of::<super::table::Entry>(), 24);
}

/// A full shard's sweep and eviction read every entry under its lock, so by default no
/// shard holds more than `KEYS_PER_SHARD` keys: 256 shards for the default million.
#[test]
fn by_default_no_shard_holds_more_than_keys_per_shard() {
    for max_keys in [1_000, 100_000, 1_000_000, 10_000_000] {
        let store = MemoryStore::builder().max_keys(max_keys).build();
        let shards = store.inner.shards.len();
        assert!(shards.is_power_of_two(), "{max_keys}: {shards}");
        assert!(
            store.inner.per_shard <= super::KEYS_PER_SHARD,
            "{max_keys} keys in {shards} shards"
        );
    }
    assert!(MemoryStore::new().inner.shards.len() >= 256);
    // Asked for, the count is the caller's.
    let store = MemoryStore::builder().max_keys(1_000_000).shards(8).build();
    assert_eq!(store.inner.shards.len(), 8);
}
