//! Memory-store checks per algorithm: one hot key and 1M keys, 1 and 2 threads, with
//! governor's keyed limiter measured in the same run.
//!
//! `store/*` passes time in (1 µs later each check, so every state keeps evolving and
//! no OS clock is read): the cost of the store and the algorithm. `clock/*` is the
//! whole path a caller pays, clock included, in four pairs of two clocks each:
//! governor as its users get it (default features: `RateLimiter::keyed`, its `quanta`
//! clock) beside Spillway as its users get it (`Limiter::new`: `CoarseClock`), and
//! governor on std `Instant` (`MonotonicClock`) beside Spillway on `SystemClock`, both
//! reading the OS clock on every check.
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

use criterion::{Criterion, criterion_group};
use governor::clock::MonotonicClock;
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
    // Wait-capable (`max_wait`), never waiting at this rate: what the wait costs a
    // decision admitted at once.
    for a in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let limit = Limit::builder(a, big, second)
            .max_wait(Duration::from_secs(3600))
            .build()
            .unwrap();
        out.push((format!("{}_wait_capable", a.name()), limit));
    }
    // Waiting: half a check per µs of simulated time, one check per µs, so every
    // decision past the first queues behind the ones before (an hour of queue is more
    // than any run reaches).
    for a in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let limit = Limit::builder(a, 500_000, second)
            .burst(1)
            .max_wait(Duration::from_secs(3600))
            .build()
            .unwrap();
        out.push((format!("{}_waiting", a.name()), limit));
    }
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

/// Set in a child process: the case whose memory it measures.
const RSS_CASE: &str = "SPILLWAY_BENCH_RSS_CASE";

/// RSS growth per key of `case` (`governor`, `quota:<algorithm>` at governor's quota of
/// 1000 an hour, or a case of [`limits`]) over a million keys, measured in a fresh process of this bench:
/// in a process that has freed memory before, a store reuses it and its growth reads
/// low (down to 0), whichever store is measured.
fn rss_per_key(case: &str) -> u64 {
    let exe = std::env::current_exe().expect("the bench's own path");
    let out = std::process::Command::new(exe)
        .env(RSS_CASE, case)
        .output()
        .expect("the bench runs itself");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{case}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// The child's side of [`rss_per_key`]: prints the growth per key.
fn rss_child(case: &str) {
    let keys = many_keys();
    // 1000 per hour: every key's state outlives the fill, so no sweep drops any.
    let (per_hour, hour) = (1000, Duration::from_secs(3600));
    let before = rss_bytes();
    if case == "governor" {
        let governor = RateLimiter::keyed(Quota::per_hour(NonZeroU32::new(per_hour).unwrap()));
        for k in &keys {
            let _ = governor.check_key(k);
        }
        println!("{}", rss_bytes().saturating_sub(before) / MANY as u64);
        return;
    }
    // `quota:<algorithm>`, or a case of `limits()`: at governor's quota.
    let algorithm: Algorithm = match case.strip_prefix("quota:") {
        Some(name) => name.parse().expect("an algorithm's name"),
        None => {
            let mut all = limits().into_iter();
            let (_, limit) = all
                .find(|(name, _)| name == case)
                .expect("a case of limits()");
            limit.algorithm()
        }
    };
    let limit = Limit::new(algorithm, u64::from(per_hour), hour).unwrap();
    // Bounded well above a million keys' states (a sliding window of precision 60 is
    // about 600 B: past the default 512 MiB), so that every key is held.
    let store = MemoryStore::builder()
        .max_keys(2 * MANY)
        .max_bytes(4 << 30)
        .build();
    let limiter = Limiter::new(store);
    for k in &keys {
        ready(limiter.check(k, &limit)).unwrap();
    }
    let grown = rss_bytes().saturating_sub(before);
    assert_eq!(limiter.store().len(), MANY, "every key is held");
    println!("{}", grown / MANY as u64);
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
        for k in &keys {
            many_store
                .decide_one(Request::new(k, &limit, 1), tick())
                .unwrap();
        }
        eprintln!(
            "{name}: {} B per key in the store for {MANY} keys (RSS growth in a fresh process), \
             {} B by footprint()",
            rss_per_key(&name),
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
        let governor_instant = RateLimiter::dashmap_with_clock(quota, MonotonicClock);
        let ours = MemoryStore::builder().max_keys(2 * MANY).build();
        let default = Limiter::new(MemoryStore::builder().max_keys(2 * MANY).build());
        for i in 0..key_count as u64 {
            let _ = governor.check_key(pick(i));
            let _ = governor_instant.check_key(pick(i));
            ready(default.check(pick(i), &gcra)).unwrap();
            ours.decide_one(Request::new(pick(i), &gcra, 1), SystemClock.now())
                .unwrap();
        }
        if key_count == MANY {
            eprintln!(
                "{MANY} keys, RSS growth per key (each in a fresh process): governor {} B, \
                 Spillway gcra {} B, fixed_window {} B, token_bucket {} B",
                rss_per_key("governor"),
                rss_per_key("quota:gcra"),
                rss_per_key("quota:fixed_window"),
                rss_per_key("quota:token_bucket"),
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
            group.bench_function(format!("governor_keyed_instant/{label}/{threads}t"), |b| {
                b.iter_custom(|iters| {
                    threaded_with_stride(iters, threads, per, |i| {
                        drop(black_box(governor_instant.check_key(pick(i))))
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

fn main() {
    if let Ok(case) = std::env::var(RSS_CASE) {
        return rss_child(&case);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
