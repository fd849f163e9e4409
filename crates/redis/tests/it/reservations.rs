//! Reservations under concurrency, on every store: 40 clients make 1,000 reserve/commit
//! pairs against one budget, each reserving an estimate (1–2,000 units, random) and
//! committing what it "used" (0–3,000: some release all, some give part back, some
//! charge the excess as debt). The budget must end exactly at the sum of the commits:
//! nothing an estimate took and a commit gave back may stay charged, and nothing charged
//! past an estimate may be lost. The clock stands still, so nothing is paid back during
//! the run and the budget's `remaining` reads what was spent. A second test settles
//! reservations across a window's end, and checks the refusals.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use spillway_core::{
    Algorithm, Key, Limit, Limiter, ManualClock, MemoryStore, Request, Store, Timestamp,
};

const PAIRS: usize = 1_000;
const CLIENTS: usize = 40;
/// Large enough that every estimate is admitted (1,000 × 3,000 at most are used): the
/// test is of what commits leave, not of what is refused.
const BUDGET: u64 = 4_000_000;

/// The budget per 4,000,000 s: a unit is one second of GCRA emission time, so
/// `remaining` is exact for all three algorithms.
fn budget(algorithm: Algorithm) -> Limit {
    Limit::new(algorithm, BUDGET, Duration::from_secs(BUDGET)).unwrap()
}

async fn run<S: Store + Clone + 'static>(store: S, name: &str, algorithm: Algorithm) {
    let limit = Arc::new(budget(algorithm));
    let key = Arc::new(Key::new(format!("tenant-{name}-{algorithm}")).unwrap());
    let clock = ManualClock::new(Timestamp::from_secs(1_800_000_000));
    let limiter = Arc::new(Limiter::with_clock(store, clock));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (limiter, limit, key) = (limiter.clone(), limit.clone(), key.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(c as u64);
                let mut committed = 0u64;
                for _ in 0..PAIRS / CLIENTS {
                    let estimate = rng.random_range(1..=2_000);
                    let (decision, reservation) =
                        limiter.reserve(&key, &limit, estimate).await.unwrap();
                    let reservation = reservation.unwrap_or_else(|| panic!("{decision:?}"));
                    // Others reserve and commit in between.
                    tokio::task::yield_now().await;
                    let used = match rng.random_range(0..4) {
                        0 => 0,
                        _ => rng.random_range(0..=3_000),
                    };
                    limiter
                        .commit(&key, &limit, reservation, used)
                        .await
                        .unwrap();
                    committed += used;
                }
                committed
            })
        })
        .collect();
    let mut committed = 0;
    for client in clients {
        committed += client.await.unwrap();
    }
    let left = limiter.peek(&key, &limit).await.unwrap();
    assert_eq!(
        BUDGET - left.remaining,
        committed,
        "{name} {algorithm}: what the budget spent = the sum of the commits"
    );
    eprintln!(
        "{name} {algorithm}: {PAIRS} reserve/commit pairs from {CLIENTS} clients, \
         {committed} committed, {} remaining of {BUDGET}",
        left.remaining
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reserve_commit_pairs_leave_the_budget_at_the_sum_of_commits_on_every_store() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ] {
        run(Arc::new(MemoryStore::new()), "memory", algorithm).await;
        // Redis 6.2 too: the oldest with GETDEL, which takes a reservation's record.
        for (name, url) in support::targets().into_iter().chain([support::oldest()]) {
            let store = support::caller_clock_store(&url, "reserve").await;
            run(Arc::new(store), name, algorithm).await;
        }
    }
}

/// A fixed window gives back only in the window a reservation was charged in; a refund
/// after the window ended changes nothing (and creates no key); a limit that cannot
/// give back is refused before anything is charged.
#[tokio::test]
async fn a_window_that_ended_keeps_its_refund_and_others_are_refused() {
    refunds_in_a_window(&MemoryStore::new(), "memory").await;
    for (name, url) in support::targets() {
        refunds_in_a_window(&support::caller_clock_store(&url, "refund").await, name).await;
    }
}

async fn refunds_in_a_window(store: &impl Store, name: &str) {
    let window = Limit::new(Algorithm::FixedWindow, 100, Duration::from_secs(60)).unwrap();
    let log = Limit::new(Algorithm::SlidingLog, 100, Duration::from_secs(60)).unwrap();
    // A minute's start (1,800,000,000 is a multiple of 60).
    let start = Timestamp::from_secs(1_800_000_000);
    let key = Key::new("tenant").unwrap();
    let one = |r, now| async move { store.check_one(r, now).await.unwrap() };
    // Reserved 80 at 0 s, 30 used: 30 spent in this window.
    let d = one(Request::new(&key, &window, 80), start).await;
    assert!(d.allowed(), "{name}");
    let at = start;
    let d = one(
        Request::refund(&key, &window, 50, at),
        start.saturating_add(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(d.remaining, 70, "{name}: 80 reserved, 50 given back");
    // Reserved 60 at 10 s, committed in the next window: nothing to give back.
    let at = start.saturating_add(Duration::from_secs(10));
    assert!(one(Request::new(&key, &window, 60), at).await.allowed());
    let next = start.saturating_add(Duration::from_secs(61));
    let d = one(Request::refund(&key, &window, 60, at), next).await;
    assert_eq!(d.remaining, 100, "{name}: the next window is untouched");
    let d = one(Request::new(&key, &window, 0), next).await;
    assert_eq!(d.remaining, 100, "{name}: and stays so");
    // A sliding log cannot give back: refused, nothing charged.
    let e = store
        .check_one(Request::refund(&key, &log, 1, start), start)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot give units back"), "{name}: {e}");
}
