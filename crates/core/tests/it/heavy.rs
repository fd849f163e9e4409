//! A heavy batch's timeouts do not open the breaker, a light one's do: a store that
//! never answers a heavy batch (as Redis busy with a sliding window of precision 1,000
//! across many keys may not within a 10 ms timeout), on tokio's paused clock, so the
//! outcome is the same on an idle machine and a loaded one.

use std::time::Duration;

use spillway_core::{
    Algorithm, Breaker, BreakerState, Guard, GuardedStore, Key, Limit, MemoryStore, Mode,
    OnStoreError, Request, Source, Store, Timestamp, is_heavy,
};

const T0: u64 = 1_702_080_000_000_000;

/// The memory store, except that a heavy batch is never answered (or, when `all`,
/// no batch is).
struct Stuck {
    store: MemoryStore,
    all: bool,
}

impl Store for Stuck {
    async fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<spillway_core::BatchDecision, spillway_core::Error> {
        if self.all || is_heavy(requests) {
            std::future::pending::<()>().await;
        }
        self.store.check(requests, now).await
    }

    async fn reset(
        &self,
        key: &Key,
        limit: &Limit,
        now: Timestamp,
    ) -> Result<(), spillway_core::Error> {
        self.store.reset(key, limit, now).await
    }
}

fn guarded(all: bool) -> GuardedStore<Stuck> {
    let store = Stuck {
        store: MemoryStore::new(),
        all,
    };
    GuardedStore::new(store, Breaker::new(5, Duration::from_secs(1)))
        .timeout(Duration::from_millis(10))
}

#[tokio::test(start_paused = true)]
async fn a_heavy_batchs_timeouts_leave_the_breaker_shut_and_a_light_ones_open_it() {
    let hour = Duration::from_secs(3600);
    let light = Limit::new(Algorithm::FixedWindow, 1_000_000, hour).unwrap();
    let wide = Algorithm::SlidingWindow {
        precision: 1000,
        edge: spillway_core::Edge::default(),
    };
    let heavy = Limit::new(wide, 1_000_000, hour).unwrap();
    let keys: Vec<Key> = (0..16)
        .map(|i| Key::new(format!("h{i}")).unwrap())
        .collect();
    let heavy_batch: Vec<Request<'_>> = keys.iter().map(|k| Request::new(k, &heavy, 1)).collect();
    assert!(is_heavy(&heavy_batch));
    let user = Key::new("light").unwrap();
    let light_batch = [Request::new(&user, &light, 1)];
    assert!(!is_heavy(&light_batch));
    let open = vec![Guard::new(Mode::Enforce, OnStoreError::Open); heavy_batch.len()];
    let closed = [Guard::new(Mode::Enforce, OnStoreError::Closed)];
    let now = Timestamp::from_micros(T0);

    let store = guarded(false);
    for round in 0..20 {
        let answer = store.decide(&heavy_batch, &open, now).await.unwrap();
        assert!(
            answer.failure.is_some(),
            "round {round}: a timeout answered by policy"
        );
        assert!(answer.batch.allowed(), "on_store_error: open admits");
    }
    assert_eq!(
        store.breaker().state(),
        BreakerState::Closed,
        "20 heavy timeouts in a row"
    );
    let answer = store.decide(&light_batch, &closed, now).await.unwrap();
    assert_eq!(
        answer.sources,
        [Source::Store],
        "the light batch is the store's"
    );

    // The same store stuck for every batch: five light timeouts open it.
    let store = guarded(true);
    for _ in 0..5 {
        assert!(store.decide(&light_batch, &closed, now).await.is_err());
    }
    assert_eq!(store.breaker().state(), BreakerState::Open);
}
