//! Leases and sync keep their stated bounds: several simulated servers (each a
//! `GuardedStore` sharing one store) on a manual clock, random traffic on one
//! fixed-window key, flushed by a ticker every `MIN_SYNC`. Per aligned window, with `A`
//! admitted, `n` arrivals and `L` the limit:
//!
//! - lease `N`: `A ≤ L` (never over) and `A ≥ min(n, L − servers × (N − 1))`;
//! - sync `D`: `A ≥ min(n, L)` (never under) and `A ≤ L + servers × m`, `m` the most
//!   one server admitted in any `2D` of the window.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use spillway_core::sharing::MIN_SYNC;
use spillway_core::{
    Algorithm, Breaker, Guard, GuardedStore, Key, Limit, MemoryStore, Mode, OnStoreError, Request,
    Sharing, Source, Store, Timestamp,
};

const T0: u64 = 1_702_080_000_000_000; // a whole number of seconds: windows align to it
const WINDOW: u64 = 1_000_000;
const TICK: u64 = MIN_SYNC.as_micros() as u64;

type Server = GuardedStore<Arc<MemoryStore>>;

fn servers(n: usize, store: &Arc<MemoryStore>) -> Vec<Server> {
    (0..n)
        .map(|_| {
            GuardedStore::new(Arc::clone(store), Breaker::new(5, Duration::from_secs(1)))
                .shares(true)
        })
        .collect()
}

/// What one run admitted: per window, the admitted times of each server.
struct Run {
    /// `[window][server]` → admitted times (µs since T0).
    admitted: Vec<Vec<Vec<u64>>>,
    /// Arrivals per window.
    arrivals: Vec<u64>,
}

fn run(servers: &[Server], limit: &Limit, sharing: Sharing, steps: &[(u64, usize)]) -> Run {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let key = Key::new("k").unwrap();
    let guard = guard(sharing);
    let windows = (steps.iter().map(|s| s.0).sum::<u64>() / WINDOW + 1) as usize;
    let mut out = Run {
        admitted: vec![vec![Vec::new(); servers.len()]; windows],
        arrivals: vec![0; windows],
    };
    let (mut now, mut tick) = (0, 0);
    for &(gap, server) in steps {
        now += gap;
        while tick + TICK <= now {
            tick += TICK;
            for s in servers {
                rt.block_on(s.flush(Timestamp::from_micros(T0 + tick)));
            }
        }
        let at = Timestamp::from_micros(T0 + now);
        let answer = rt
            .block_on(servers[server].decide(&[Request::new(&key, limit, 1)], &guard, at))
            .unwrap();
        let w = (now / WINDOW) as usize;
        out.arrivals[w] += 1;
        if answer.batch.allowed() {
            out.admitted[w][server].push(now);
        }
    }
    out
}

/// The most of sorted `times` in any interval of length `span`.
fn most_within(times: &[u64], span: u64) -> u64 {
    let mut lo = 0;
    let mut best = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= span {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u64
}

/// Gaps from bursts (0 µs) to pauses past a window; which server, at random.
fn arb_steps(servers: usize) -> impl Strategy<Value = Vec<(u64, usize)>> {
    let gap =
        prop_oneof![3 => Just(0u64), 6 => 0u64..5_000, 2 => 0u64..60_000, 1 => 0u64..1_500_000];
    prop::collection::vec((gap, 0..servers), 1..400)
}

fn fixed(limit: u64) -> Limit {
    Limit::new(Algorithm::FixedWindow, limit, Duration::from_micros(WINDOW)).unwrap()
}

/// The guard of one enforced, `closed` request shared by `sharing`.
fn guard(sharing: Sharing) -> [Guard; 1] {
    [Guard::new(Mode::Enforce, OnStoreError::Closed).sharing(sharing)]
}

/// What `store` says remains of `limit` for `key` at `now` (a cost-0 peek).
async fn remaining(store: &impl Store, key: &Key, limit: &Limit, now: Timestamp) -> u64 {
    let peek = store
        .check(&[Request::new(key, limit, 0)], now)
        .await
        .unwrap();
    peek.decisions[0].remaining
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_lease_never_over_admits_and_under_admits_at_most_its_size_per_server(
        (n, steps) in (1usize..=4).prop_flat_map(|n| (Just(n), arb_steps(n))),
        limit in 1u64..60,
        size in 1u64..=12,
    ) {
        let size = size.min(limit);
        let limit = fixed(limit);
        let servers = servers(n, &Arc::new(MemoryStore::new()));
        let run = run(&servers, &limit, Sharing::Lease { units: size }, &steps);
        for (w, per_server) in run.admitted.iter().enumerate() {
            let admitted: u64 = per_server.iter().map(|t| t.len() as u64).sum();
            let floor = run.arrivals[w].min(limit.limit().saturating_sub(n as u64 * (size - 1)));
            prop_assert!(admitted <= limit.limit(), "window {w}: {admitted} admitted");
            prop_assert!(admitted >= floor, "window {w}: {admitted} admitted, at least {floor}");
        }
    }

    #[test]
    fn sync_never_under_admits_and_over_admits_within_its_bound(
        (n, steps) in (1usize..=4).prop_flat_map(|n| (Just(n), arb_steps(n))),
        limit in 1u64..60,
        every in prop_oneof![Just(10u64), Just(30), Just(100)],
    ) {
        let every = Duration::from_millis(every);
        let limit = fixed(limit);
        let servers = servers(n, &Arc::new(MemoryStore::new()));
        let run = run(&servers, &limit, Sharing::Sync { every }, &steps);
        let span = 2 * every.as_micros() as u64;
        for (w, per_server) in run.admitted.iter().enumerate() {
            let admitted: u64 = per_server.iter().map(|t| t.len() as u64).sum();
            let m = per_server.iter().map(|t| most_within(t, span)).max().unwrap_or(0);
            let bound = limit.limit() + n as u64 * m;
            let floor = run.arrivals[w].min(limit.limit());
            prop_assert!(admitted >= floor, "window {w}: {admitted} admitted, at least {floor}");
            prop_assert!(admitted <= bound, "window {w}: {admitted} admitted, bound {bound}");
        }
    }
}

#[tokio::test]
async fn one_lease_call_answers_many_decisions() {
    let store = Arc::new(MemoryStore::new());
    let server = &servers(1, &store)[0];
    let limit = fixed(100);
    let key = Key::new("k").unwrap();
    let guard = guard(Sharing::Lease { units: 20 });
    let now = Timestamp::from_micros(T0);
    let mut sources = Vec::new();
    for _ in 0..40 {
        let answer = server
            .decide(&[Request::new(&key, &limit, 1)], &guard, now)
            .await
            .unwrap();
        assert!(answer.batch.allowed());
        sources.push(answer.sources[0]);
    }
    let calls = sources.iter().filter(|s| **s == Source::Store).count();
    assert_eq!(calls, 2, "{sources:?}");
    // The store counted both leases: 40 units.
    assert_eq!(remaining(&store, &key, &limit, now).await, 60);
}

#[tokio::test]
async fn a_reset_and_a_reload_forget_the_lease() {
    let store = Arc::new(MemoryStore::new());
    let server = &servers(1, &store)[0];
    let limit = fixed(100);
    let key = Key::new("k").unwrap();
    let guard = guard(Sharing::Lease { units: 20 });
    let now = Timestamp::from_micros(T0);
    let request = [Request::new(&key, &limit, 1)];
    let decide = || server.decide(&request, &guard, now);
    assert_eq!(decide().await.unwrap().sources, [Source::Store]);
    assert_eq!(decide().await.unwrap().sources, [Source::Share]);
    server.reset(&key, &limit, now).await.unwrap();
    assert_eq!(
        decide().await.unwrap().sources,
        [Source::Store],
        "a reset forgets the lease"
    );
    server.forget_all();
    assert_eq!(
        decide().await.unwrap().sources,
        [Source::Store],
        "a reload forgets it too"
    );
}

#[tokio::test]
async fn sync_counts_locally_and_flushes_on_its_interval() {
    let store = Arc::new(MemoryStore::new());
    let server = &servers(1, &store)[0];
    let limit = fixed(100);
    let key = Key::new("k").unwrap();
    let every = Duration::from_millis(100);
    let guard = guard(Sharing::Sync { every });
    let at = |ms: u64| Timestamp::from_micros(T0 + ms * 1000);
    let peek = || remaining(&store, &key, &limit, at(0));
    let first = server
        .decide(&[Request::new(&key, &limit, 1)], &guard, at(0))
        .await
        .unwrap();
    assert_eq!(first.sources, [Source::Store]);
    for _ in 0..9 {
        let d = server
            .decide(&[Request::new(&key, &limit, 1)], &guard, at(1))
            .await
            .unwrap();
        assert_eq!(d.sources, [Source::Share]);
    }
    assert_eq!(peek().await, 99, "nine hits pending");
    server.flush(at(50)).await;
    assert_eq!(peek().await, 99, "not due yet");
    server.flush(at(90)).await;
    assert_eq!(peek().await, 90, "flushed at the last tick of the interval");
}

/// A store that yields before it answers, so concurrent decisions interleave at the
/// store call as they do over a network.
struct Slow(Arc<MemoryStore>);

impl Store for Slow {
    async fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<spillway_core::BatchDecision, spillway_core::Error> {
        tokio::task::yield_now().await;
        self.0.check(requests, now).await
    }

    async fn reset(
        &self,
        key: &Key,
        limit: &Limit,
        now: Timestamp,
    ) -> Result<(), spillway_core::Error> {
        self.0.reset(key, limit, now).await
    }
}

#[tokio::test]
async fn concurrent_requests_take_one_lease_at_a_time_and_spend_every_unit() {
    let store = Arc::new(MemoryStore::new());
    let server = GuardedStore::new(
        Slow(Arc::clone(&store)),
        Breaker::new(5, Duration::from_secs(1)),
    );
    let limit = fixed(1000);
    let key = Key::new("k").unwrap();
    let guard = guard(Sharing::Lease { units: 20 });
    let now = Timestamp::from_micros(T0);
    let admitted = std::cell::Cell::new(0u64);
    let caller = |n: usize| {
        let (key, limit, admitted, server) = (&key, &limit, &admitted, &server);
        async move {
            for _ in 0..n {
                let request = [Request::new(key, limit, 1)];
                if server
                    .decide(&request, &guard, now)
                    .await
                    .unwrap()
                    .batch
                    .allowed()
                {
                    admitted.set(admitted.get() + 1);
                }
            }
        }
    };
    // 32 callers' first requests at once: one takes a lease, the others ask for one unit
    // each, so the server holds one lease's spare units, not 32 leases' worth.
    futures_util::future::join_all((0..32).map(|_| caller(1))).await;
    assert_eq!(remaining(&store, &key, &limit, now).await, 1000 - 32 - 19);
    // Then the limit spent by 2,000 more: every unit the store counted is admitted (a
    // cached denial of the store's last units must not hide the ones held here).
    futures_util::future::join_all((0..32).map(|_| caller(2000 / 32 + 1))).await;
    assert_eq!(admitted.get(), 1000);
}

#[tokio::test]
async fn on_a_store_in_this_process_leases_and_sync_are_no_ops() {
    let server = GuardedStore::new(MemoryStore::new(), Breaker::new(5, Duration::from_secs(1)));
    let limit = fixed(100);
    let key = Key::new("k").unwrap();
    let now = Timestamp::from_micros(T0);
    for sharing in [
        Sharing::Lease { units: 20 },
        Sharing::Sync { every: MIN_SYNC },
    ] {
        let guard = guard(sharing);
        for _ in 0..3 {
            let answer = server
                .decide(&[Request::new(&key, &limit, 1)], &guard, now)
                .await
                .unwrap();
            assert_eq!(answer.sources, [Source::Store], "{sharing}");
        }
        assert_eq!(server.flush(now).await, 0);
    }
    assert_eq!(
        remaining(server.store(), &key, &limit, now).await,
        94,
        "exactly six charged, one by one"
    );
}
