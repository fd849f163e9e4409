//! The deny cache never changes an answer: random traffic (batches of one or two
//! limits, costs 0–3, every algorithm, `count_rejected` sometimes, a manual clock that
//! also stands still) decided by a `GuardedStore` with the cache on and by the same kind
//! of store without it gives the same decision, field for field, every time. The second
//! test shows the cache does answer.

use std::time::Duration;

use proptest::prelude::*;
use spillway_core::{
    Algorithm, Breaker, Edge, Guard, GuardedStore, Key, Limit, MemoryStore, Mode, OnStoreError,
    Rejected, Request, Source, Store, Timestamp,
};

const T0: u64 = 1_702_080_000_000_000;

fn arb_limit() -> impl Strategy<Value = Limit> {
    (
        prop_oneof![Just(1_000u64), Just(999_999), Just(1_000_000)],
        1u64..=8,
        1u64..=10,
        0usize..8,
        any::<bool>(),
    )
        .prop_map(|(window, limit, burst, which, count_rejected)| {
            let edge = [Edge::Strict, Edge::Lenient, Edge::Interpolate][which % 3];
            let algorithm = match which {
                0 => Algorithm::FixedWindow,
                1 => Algorithm::SlidingLog,
                2..=4 => Algorithm::SlidingWindow { precision: 1, edge },
                5 => Algorithm::TokenBucket,
                _ => Algorithm::Gcra,
            };
            let mut b = Limit::builder(algorithm, limit, Duration::from_micros(window))
                .count_rejected(count_rejected && which % 2 == 0);
            if matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra) {
                b = b.burst(burst);
            }
            b.build().expect("generated limits are valid")
        })
}

/// (µs to advance, key, limits of the batch, cost): mostly unit costs, so the cache has
/// something to answer.
fn arb_steps() -> impl Strategy<Value = Vec<(u64, usize, Vec<usize>, u64)>> {
    let gap = prop_oneof![4 => Just(0u64), 6 => 0u64..300, 2 => 0u64..3_000_000];
    let cost = prop_oneof![8 => Just(1u64), 1 => Just(0u64), 1 => 2u64..=3];
    let batch = prop_oneof![3 => prop::collection::vec(0usize..3, 1), 1 => Just(vec![0, 1])];
    prop::collection::vec((gap, 0usize..2, batch, cost), 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn the_deny_cache_never_changes_a_decision(
        limits in prop::collection::vec(arb_limit(), 3),
        steps in arb_steps(),
    ) {
        let cached = GuardedStore::new(MemoryStore::new(), Breaker::new(5, Duration::from_secs(1)))
            .deny_cache(1 << 20);
        let keys = [Key::new("a").unwrap(), Key::new("b").unwrap()];
        same_decisions(&cached, &limits, &steps, |key, _| &keys[key])?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Answering counted denials too (the reference's local cache) changes no decision
    /// either, when no two limits share a state (the service's keys name their rule): a
    /// fixed window over its limit is denied until it ends, however far over it is.
    /// Limits charge rejected requests never, always, or when they deny themselves.
    #[test]
    fn answering_counted_denials_never_changes_a_decision(
        limits in prop::collection::vec(arb_limit(), 3),
        rejected in prop::collection::vec(0usize..3, 3),
        steps in arb_steps(),
    ) {
        let limits: Vec<Limit> = limits
            .iter()
            .zip(&rejected)
            .map(|(l, &r)| l.with_rejected([Rejected::NotCharged, Rejected::Charged, Rejected::ChargedWhenOwn][r]))
            .collect();
        let cached = GuardedStore::new(MemoryStore::new(), Breaker::new(5, Duration::from_secs(1)))
            .deny_cache(1 << 20)
            .deny_cache_counting(true);
        // One key per limit: no two limits share a state.
        let keys = [Key::new("a").unwrap(), Key::new("b").unwrap(), Key::new("c").unwrap()];
        same_decisions(&cached, &limits, &steps, |_, limit| &keys[limit])?;
    }
}

/// Decides every step on `cached` and on a plain memory store, and compares the
/// decisions field for field. `key(step's key, limit)` picks a request's key.
fn same_decisions<'k>(
    cached: &GuardedStore<MemoryStore>,
    limits: &[Limit],
    steps: &[(u64, usize, Vec<usize>, u64)],
    key: impl Fn(usize, usize) -> &'k Key,
) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let plain = MemoryStore::new();
    let guard = Guard::new(Mode::Enforce, OnStoreError::Closed);
    let mut now = T0;
    for (n, (gap, k, batch, cost)) in steps.iter().enumerate() {
        now += gap;
        let requests: Vec<Request<'_>> = batch
            .iter()
            .map(|&l| Request::new(key(*k, l), &limits[l], *cost))
            .collect();
        let at = Timestamp::from_micros(now);
        let want = rt.block_on(plain.check(&requests, at)).unwrap();
        let got = rt
            .block_on(cached.decide(&requests, &vec![guard; requests.len()], at))
            .unwrap();
        prop_assert_eq!(&got.batch, &want, "step {}: {:?}", n, requests);
    }
    Ok(())
}

/// The property above only means something if the cache answers: on a hot key over its
/// limit it answers every request until the retry time, and the store sees none of them.
#[test]
fn a_denied_hot_key_is_answered_from_the_cache_until_its_retry_time() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = GuardedStore::new(MemoryStore::new(), Breaker::new(5, Duration::from_secs(1)))
        .deny_cache(1 << 20);
    let limit = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(60)).unwrap();
    let key = Key::new("user:1").unwrap();
    let guard = [Guard::new(Mode::Enforce, OnStoreError::Closed)];
    let at = |us: u64| Timestamp::from_micros(T0 + us);
    let decide = |t| {
        rt.block_on(store.decide(&[Request::new(&key, &limit, 1)], &guard, t))
            .unwrap()
    };
    for _ in 0..10 {
        assert_eq!(decide(at(0)).sources, [Source::Store]);
    }
    let first = decide(at(0));
    assert_eq!(
        first.sources,
        [Source::Store],
        "the first denial comes from the store"
    );
    let retry = first.batch.retry_after().unwrap();
    assert_eq!(retry, Duration::from_secs(6));
    for _ in 0..100 {
        let d = decide(at(1_000_000));
        assert_eq!(d.sources, [Source::Cache]);
        assert_eq!(d.batch.retry_after(), Some(Duration::from_secs(5)));
    }
    // At the retry time the store decides again, and admits.
    let later = decide(at(6_000_000));
    assert_eq!(later.sources, [Source::Store]);
    assert!(later.batch.allowed());
    // A reset forgets the cached denial at once.
    assert!(!decide(at(6_000_000)).batch.allowed());
    rt.block_on(store.store().reset(&key, &limit, at(6_000_000)))
        .unwrap();
    store.forget(&key, &limit);
    assert!(decide(at(6_000_000)).batch.allowed());
}

/// Issue #37: the bound counted entries at 96 bytes each, but an entry keeps its key
/// alive, and a key may be 1 KiB: a flood of long keys held about 11 times the budget.
/// Each entry now costs its key's text too, and the cache holds no more than its bytes.
#[test]
fn long_keys_are_charged_to_the_bound() {
    let budget = 1 << 20;
    let cache = spillway_core::DenyCache::with_bytes(budget).unwrap();
    let limit = Limit::new(Algorithm::FixedWindow, 1, Duration::from_secs(3600)).unwrap();
    let denied = spillway_core::Decision {
        outcome: spillway_core::Outcome::Denied {
            retry_after: Duration::from_secs(60),
        },
        limit: 1,
        remaining: 0,
        reset_after: Duration::from_secs(60),
        wait: std::time::Duration::ZERO,
        borrowed: false,
        queued: false,
    };
    for i in 0..20_000 {
        let key = Key::new(format!("{i:0>1000}")).unwrap();
        cache.remember(&key, &limit, 1, &denied, 1_000);
    }
    assert!(cache.bytes() <= budget, "{} bytes", cache.bytes());
    // About budget / (96 + 1,000) entries, not budget / 96.
    assert!(cache.len() < budget / 1_000, "{} entries", cache.len());
    assert!(cache.len() > budget / 1_200, "{} entries", cache.len());
}
