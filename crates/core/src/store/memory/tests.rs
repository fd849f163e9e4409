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
            store.inner.per_shard <= super::builder::KEYS_PER_SHARD,
            "{max_keys} keys in {shards} shards"
        );
    }
    assert!(MemoryStore::new().inner.shards.len() >= 256);
    // Asked for, the count is the caller's.
    let store = MemoryStore::builder().max_keys(1_000_000).shards(8).build();
    assert_eq!(store.inner.shards.len(), 8);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `decide_joined` is `decide_one` on `Key::joined` of the same parts: the same
    /// decisions and errors, on one state whichever way a key is asked (a known key
    /// found by its parts, a new one inserted by them and then found as a `Key`), on
    /// keys short enough for the stack and longer, on the default hasher and a rehashing
    /// one.
    #[test]
    fn a_key_asked_by_its_parts_is_the_same_key(
        rehash in any::<bool>(),
        ops in prop::collection::vec((0usize..2, 0usize..5, any::<bool>(), 0u64..3, 0u64..400_000), 1..120),
    ) {
        let names = ["per-key", "r"];
        let values = ["a", "user:1", "", &"v".repeat(300), &"w".repeat(1100)];
        let limits = [
            Limit::new(Algorithm::Gcra, 3, Duration::from_secs(1)).unwrap(),
            Limit::new(
                Algorithm::SlidingWindow { precision: 10, edge: crate::Edge::Strict },
                4,
                Duration::from_secs(1),
            )
            .unwrap(),
        ];
        let asked = if rehash {
            Asked::Rehash(MemoryStore::builder().hasher(std::hash::RandomState::new()).build())
        } else {
            Asked::Default(MemoryStore::new())
        };
        let model = MemoryStore::new();
        let mut t = 1_702_080_000_000_000u64;
        for (i, (name, value, by_parts, cost, step)) in ops.into_iter().enumerate() {
            t += step;
            let now = Timestamp::from_micros(t);
            let limit = &limits[i % 2];
            let parts = [names[name], ":", values[value]];
            let one = |store: &dyn Fn(Request<'_>) -> Result<Decision, crate::Error>| {
                Key::joined(&parts).and_then(|k| store(Request::new(&k, limit, cost)))
            };
            let want = one(&|r| model.decide_one(r, now)).map_err(|e| e.to_string());
            let got = match (&asked, by_parts) {
                (Asked::Default(s), true) => s.decide_joined(&parts, limit, cost, now),
                (Asked::Default(s), false) => one(&|r| s.decide_one(r, now)),
                (Asked::Rehash(s), true) => s.decide_joined(&parts, limit, cost, now),
                (Asked::Rehash(s), false) => one(&|r| s.decide_one(r, now)),
            };
            prop_assert_eq!(got.map_err(|e| e.to_string()), want);
        }
    }
}

/// The two hashers a store may have, for the test above.
enum Asked {
    Default(MemoryStore),
    Rehash(MemoryStore<super::Rehash<std::hash::RandomState>>),
}

/// A limit that needs a member is refused by its parts as by its key.
#[test]
fn a_distinct_limit_asked_by_parts_is_refused_as_by_key() {
    let store = MemoryStore::new();
    let limit = Limit::new(
        Algorithm::Distinct { precision: 10 },
        3,
        Duration::from_secs(1),
    )
    .unwrap();
    let now = Timestamp::from_secs(1_700_000_000);
    let by_parts = store.decide_joined(&["r", ":", "a"], &limit, 1, now);
    let key = Key::joined(&["r", ":", "a"]).unwrap();
    let by_key = store.decide_one(Request::new(&key, &limit, 1), now);
    assert_eq!(
        by_parts.unwrap_err().to_string(),
        by_key.unwrap_err().to_string()
    );
}
