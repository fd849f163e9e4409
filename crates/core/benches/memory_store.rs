//! Memory-store checks per algorithm: one hot key and 1M keys, 1 and 2 threads, with
//! governor's keyed limiter (dashmap, std `Instant` clock) measured in the same run.
//!
//! `store/*` passes time in (1 µs later each check, so every state keeps evolving and
//! no OS clock is read): the cost of the store and the algorithm. `clock/*` is the
//! whole path a caller pays, clock included, next to governor, which reads `Instant`
//! on every check.
//!
//! Limits are large enough that every check is admitted (the path that writes state).
//!
//! Run: `cargo bench -p spillway-core --bench memory_store`

#![allow(clippy::disallowed_methods)] // timing multi-threaded runs needs Instant::now

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use spillway_core::{
    Algorithm, Clock, CoarseClock, Edge, Key, Limit, Limiter, MemoryStore, Request, SystemClock,
    Timestamp,
};

const MANY: usize = 1_000_000;
const T0: u64 = 1_702_080_000_000_000;

fn limits() -> Vec<(String, Limit)> {
    // 10^12 per second: never denies, even at one check per µs of simulated time.
    let big = 1_000_000_000_000;
    let second = Duration::from_secs(1);
    let mut out: Vec<(String, Limit)> = [
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ]
    .into_iter()
    .map(|a| (a.name().to_string(), Limit::new(a, big, second).unwrap()))
    .collect();
    // The log keeps one entry per admitted µs: 1M entries in a 1 s window.
    out.push((
        "sliding_log".into(),
        Limit::new(Algorithm::SlidingLog, big, second).unwrap(),
    ));
    for (precision, edge) in [(1, Edge::Interpolate), (60, Edge::Strict)] {
        let a = Algorithm::SlidingWindow { precision, edge };
        out.push((
            format!("sliding_window_p{precision}_{edge}"),
            Limit::new(a, big, Duration::from_secs(60)).unwrap(),
        ));
    }
    out
}

/// Runs `iters` checks split across `threads`, returns the wall time: per-check time
/// is then total time / total checks, i.e. the inverse of aggregate throughput.
fn threaded(iters: u64, threads: u64, check: impl Fn(u64) + Sync) -> Duration {
    threaded_with_stride(iters, threads, iters.div_ceil(threads), check)
}

/// As [`threaded`], with thread `t` handed indices from `t * stride`.
fn threaded_with_stride(
    iters: u64,
    threads: u64,
    stride: u64,
    check: impl Fn(u64) + Sync,
) -> Duration {
    let per = iters.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let check = &check;
            s.spawn(move || {
                for i in 0..per {
                    check(t * stride + i);
                }
            });
        }
    });
    start.elapsed()
}

/// `user:0` .. `user:999999`.
fn many_keys() -> Vec<Key> {
    (0..MANY)
        .map(|i| Key::new(format!("user:{i}")).unwrap())
        .collect()
}

/// The output of a future that is ready at once (a memory-store check never waits).
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("a memory-store check never waits"),
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

fn store(c: &mut Criterion) {
    let keys = many_keys();
    let hot = Key::new("hot").unwrap();
    let mut group = c.benchmark_group("store");
    for (name, limit) in limits() {
        let hot_store = MemoryStore::new();
        let clock = AtomicU64::new(T0);
        let tick = || Timestamp::from_micros(clock.fetch_add(1, Ordering::Relaxed));
        // Per-thread time would race on one counter; give each check its own µs instead.
        for threads in [1, 2] {
            group.bench_function(format!("{name}/hot/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    let base = tick().as_micros();
                    clock.fetch_add(iters, Ordering::Relaxed);
                    threaded(iters, threads, |i| {
                        let d = hot_store.decide_one(
                            Request::new(&hot, &limit, 1),
                            Timestamp::from_micros(base + i),
                        );
                        black_box(d.unwrap());
                    })
                })
            });
        }
        let many_store = MemoryStore::builder().max_keys(2 * MANY).build();
        let before = rss_bytes();
        for k in &keys {
            many_store
                .decide_one(Request::new(k, &limit, 1), tick())
                .unwrap();
        }
        eprintln!(
            "{name}: {} B per key in the store for {MANY} keys (RSS growth), {} B by footprint()",
            (rss_bytes().saturating_sub(before)) / MANY as u64,
            many_store.footprint(&keys[0]).unwrap_or(0)
        );
        for threads in [1, 2] {
            group.bench_function(format!("{name}/1M_keys/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    let base = tick().as_micros();
                    clock.fetch_add(iters, Ordering::Relaxed);
                    threaded(iters, threads, |i| {
                        let key = &keys[(i as usize * 7919) % MANY];
                        let d = many_store.decide_one(
                            Request::new(key, &limit, 1),
                            Timestamp::from_micros(base + i),
                        );
                        black_box(d.unwrap());
                    })
                })
            });
        }
    }
    group.finish();
}

fn with_clocks(c: &mut Criterion) {
    let keys = many_keys();
    let hot = Key::new("hot").unwrap();
    let mut group = c.benchmark_group("clock");
    let per_second = NonZeroU32::new(1_000_000_000).unwrap();
    let quota = Quota::per_second(per_second);
    let gcra = Limit::new(Algorithm::Gcra, 1_000_000_000, Duration::from_secs(1)).unwrap();
    let coarse = CoarseClock::new();

    // hot: every thread on one key. own_key: each thread on its own key (does a second
    // thread add throughput?). 1M_keys: spread over a million keys (cache misses).
    let per_thread = [Key::new("thread:0").unwrap(), Key::new("thread:1").unwrap()];
    let per: u64 = 1 << 40; // index stride between threads: far beyond any iteration count
    for (label, key_count) in [("hot", 1), ("own_key", 2), ("1M_keys", MANY)] {
        let pick = |i: u64| match key_count {
            1 => &hot,
            // Thread t is handed indices from t * per.
            2 => &per_thread[usize::from(i >= per)],
            _ => &keys[(i as usize * 7919) % MANY],
        };
        let governor = RateLimiter::keyed(quota);
        let ours = MemoryStore::builder().max_keys(2 * MANY).build();
        let default = Limiter::new(MemoryStore::builder().max_keys(2 * MANY).build());
        // One store at a time, so each one's RSS growth is its own (the keys' text is
        // shared: both hold clones of the same `Key`s).
        let before = rss_bytes();
        for i in 0..key_count as u64 {
            let _ = governor.check_key(pick(i));
        }
        let governor_bytes = rss_bytes().saturating_sub(before);
        let before = rss_bytes();
        for i in 0..key_count as u64 {
            ready(default.check(pick(i), &gcra)).unwrap();
        }
        let default_bytes = rss_bytes().saturating_sub(before);
        for i in 0..key_count as u64 {
            ours.decide_one(Request::new(pick(i), &gcra, 1), SystemClock.now())
                .unwrap();
        }
        if key_count == MANY {
            eprintln!(
                "gcra, {MANY} keys, RSS growth per key: governor {} B, Spillway {} B \
                 (footprint() {} B)",
                governor_bytes / MANY as u64,
                default_bytes / MANY as u64,
                default.store().footprint(pick(0)).unwrap_or(0)
            );
        }
        for threads in [1, 2] {
            group.bench_function(format!("governor_keyed/{label}/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    threaded_with_stride(iters, threads, per, |i| {
                        drop(black_box(governor.check_key(pick(i))))
                    })
                })
            });
            group.bench_function(format!("gcra_system_clock/{label}/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    threaded_with_stride(iters, threads, per, |i| {
                        black_box(
                            ours.decide_one(Request::new(pick(i), &gcra, 1), SystemClock.now())
                                .unwrap(),
                        );
                    })
                })
            });
            // What `Limiter::new(MemoryStore::new())` gives a user: the default clock, the
            // async API (a memory-store check is ready at once).
            group.bench_function(format!("limiter_default/{label}/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    threaded_with_stride(iters, threads, per, |i| {
                        black_box(ready(default.check(pick(i), &gcra)).unwrap());
                    })
                })
            });
            group.bench_function(format!("gcra_coarse_clock/{label}/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    threaded_with_stride(iters, threads, per, |i| {
                        black_box(
                            ours.decide_one(Request::new(pick(i), &gcra, 1), coarse.now())
                                .unwrap(),
                        );
                    })
                })
            });
        }
    }
    // Trusted keys only: foldhash is fast but not built to resist collision floods.
    let trusted = MemoryStore::builder()
        .hasher(foldhash::fast::RandomState::default())
        .build();
    group.bench_function("gcra_coarse_clock_foldhash/hot/1t", |b| {
        b.iter(|| {
            black_box(
                trusted
                    .decide_one(Request::new(&hot, &gcra, 1), coarse.now())
                    .unwrap(),
            )
        })
    });
    group.bench_function("os_clock_read/SystemClock", |b| {
        b.iter(|| black_box(SystemClock.now()))
    });
    group.bench_function("os_clock_read/CoarseClock", |b| {
        b.iter(|| black_box(coarse.now()))
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group!(name = benches; config = config(); targets = with_clocks, store);
criterion_main!(benches);
