//! Many threads on one key admit exactly the limit, for every algorithm; batches that
//! list the same keys in opposite orders neither deadlock nor over-admit.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use spillway_core::{Algorithm, Edge, Key, Limit, MemoryStore, Request, Timestamp};

const THREADS: u64 = 8;
const PER_THREAD: u64 = 250;
const LIMIT: u64 = 100;

fn every_algorithm() -> Vec<Algorithm> {
    let mut all = vec![
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];
    for edge in [Edge::Interpolate, Edge::Strict, Edge::Lenient] {
        all.push(Algorithm::SlidingWindow {
            precision: 60,
            edge,
        });
    }
    all
}

/// Runs `work` on THREADS threads started together; fails if they don't finish in 60 s
/// (a deadlock), instead of hanging the suite.
fn on_threads(work: impl Fn(u64) + Send + Sync) {
    let barrier = Barrier::new(THREADS as usize);
    let (done, finished) = mpsc::channel();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (work, barrier, done) = (&work, &barrier, done.clone());
            s.spawn(move || {
                barrier.wait();
                work(t);
                done.send(()).unwrap();
            });
        }
        for _ in 0..THREADS {
            finished
                .recv_timeout(Duration::from_secs(60))
                .expect("threads deadlocked");
        }
    });
}

/// Total cost admitted when THREADS threads race PER_THREAD requests each, of
/// `cost(thread, i)`, on one key with a limit of LIMIT per hour. The clock stands still,
/// so nothing refills while they race.
fn admitted_on_one_key(algorithm: Algorithm, cost: impl Fn(u64, u64) -> u64 + Sync) -> u64 {
    let now = Timestamp::from_secs(1_702_080_000);
    let store = MemoryStore::new();
    let limit = Limit::new(algorithm, LIMIT, Duration::from_secs(3600)).unwrap();
    let key = Key::new("hot").unwrap();
    let admitted = AtomicU64::new(0);
    on_threads(|t| {
        for i in 0..PER_THREAD {
            let cost = cost(t, i);
            let request = Request::new(&key, &limit, cost);
            if store.decide_one(request, now).unwrap().allowed() {
                admitted.fetch_add(cost, Ordering::Relaxed);
            }
        }
    });
    admitted.into_inner()
}

#[test]
fn many_threads_on_one_key_admit_exactly_the_limit() {
    for algorithm in every_algorithm() {
        assert_eq!(
            admitted_on_one_key(algorithm, |_, _| 1),
            LIMIT,
            "{algorithm}"
        );
    }
}

#[test]
fn weighted_costs_never_admit_more_than_the_limit() {
    for algorithm in every_algorithm() {
        // Costs of 1 eventually fill the last gaps, so the limit is reached exactly.
        let admitted = admitted_on_one_key(algorithm, |t, i| 1 + (t + i) % 7);
        assert_eq!(admitted, LIMIT, "{algorithm}");
    }
}

#[test]
fn batches_in_opposite_key_orders_neither_deadlock_nor_over_admit() {
    let now = Timestamp::from_secs(1_702_080_000);
    // Two shards: every batch's keys collide in shards, the worst case for lock order.
    for store in [
        MemoryStore::new(),
        MemoryStore::builder().shards(2).max_keys(1000).build(),
    ] {
        let limit = Limit::new(Algorithm::SlidingLog, LIMIT, Duration::from_secs(3600)).unwrap();
        let keys: Vec<Key> = (0..4).map(|i| Key::new(format!("k{i}")).unwrap()).collect();
        let admitted = AtomicU64::new(0);
        on_threads(|t| {
            for i in 0..PER_THREAD {
                // Odd threads list the keys backwards; each batch names three of the four.
                let mut batch: Vec<Request<'_>> = (0..4)
                    .filter(|k| *k != (i % 4) as usize)
                    .map(|k| Request::new(&keys[k], &limit, 1))
                    .collect();
                if t % 2 == 1 {
                    batch.reverse();
                }
                if store.decide(&batch, now).unwrap().allowed() {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        // Every key allows 100 and every batch charges three of the four keys, so at most
        // floor(4 × 100 / 3) = 133 batches fit; and each key ends at or under its limit.
        let admitted = admitted.into_inner();
        assert!(admitted <= 4 * LIMIT / 3, "{admitted} batches admitted");
        for key in &keys {
            let peek = store.decide_one(Request::new(key, &limit, 0), now).unwrap();
            assert!(peek.allowed(), "{key} over its limit");
        }
        let used: u64 = keys
            .iter()
            .map(|k| {
                LIMIT
                    - store
                        .decide_one(Request::new(k, &limit, 0), now)
                        .unwrap()
                        .remaining
            })
            .sum();
        assert_eq!(
            used,
            3 * admitted,
            "every admitted batch charged exactly its three keys"
        );
    }
}
