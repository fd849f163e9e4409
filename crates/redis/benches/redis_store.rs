//! The Redis store under load, next to its ceiling: `redis-benchmark` sending `FCALL` of
//! the same function library at the same concurrency, one decision a call (what Redis
//! does for a lone decision; the store's coalesced calls carry several). Also bytes per
//! key in Redis.
//!
//! Run: `cargo bench -p spillway-redis --bench redis_store` (starts its own
//! redis-server, or uses `SPILLWAY_BENCH_REDIS=redis://…`). `BENCH_SECS` sets the
//! time per configuration (default 3).
//!
//! Not criterion: the figures wanted are throughput and latency percentiles of many
//! concurrent callers on one connection, which this measures with hdrhistogram.

#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;
use spillway_core::{Algorithm, Edge, Key, Limit, Request, Store, Timestamp};
use spillway_redis::{RedisStore, TimeSource, script_argv};

const KEYS: usize = 10_000;

#[derive(Clone, Copy)]
enum Keys {
    Random,
    Hot,
}

struct Run {
    per_sec: f64,
    p50_us: f64,
    p99_us: f64,
}

fn main() {
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let (_server, url) = spillway_testkit::redis::bench_redis();
    let port = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = rt.block_on(async {
        RedisStore::builder(&url)
            .prefix("bench:")
            .timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("connect")
    });

    println!("Redis at {url}, {secs} s per run, limit 1000 per minute, cost 1\n");
    println!(
        "| algorithm | keys | callers | spillway decisions/s | p50 µs | p99 µs | redis-benchmark FCALL/s | p50 µs | p99 µs | spillway / ceiling |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let minute = Duration::from_secs(60);
    for limit in [
        Limit::new(Algorithm::Gcra, 1000, minute).unwrap(),
        Limit::new(Algorithm::SlidingLog, 1000, minute).unwrap(),
    ] {
        for keys in [Keys::Random, Keys::Hot] {
            for callers in [1usize, 50] {
                let ours = rt.block_on(spillway_run(&store, &limit, keys, callers, secs));
                let requests = (ours.per_sec * secs as f64) as u64;
                let ceiling = redis_benchmark(&port, &limit, keys, callers, requests.max(1000));
                println!(
                    "| {} | {} | {callers} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0}% |",
                    limit.algorithm().name(),
                    match keys {
                        Keys::Random => "10,000 random",
                        Keys::Hot => "one hot key",
                    },
                    ours.per_sec,
                    ours.p50_us,
                    ours.p99_us,
                    ceiling.per_sec,
                    ceiling.p50_us,
                    ceiling.p99_us,
                    100.0 * ours.per_sec / ceiling.per_sec,
                );
            }
        }
    }
    println!();
    rt.block_on(bytes_per_key(&url));
}

async fn spillway_run(
    store: &RedisStore,
    limit: &Limit,
    keys: Keys,
    callers: usize,
    secs: u64,
) -> Run {
    let keyset: Arc<Vec<Key>> = Arc::new(
        (0..KEYS)
            .map(|i| Key::new(format!("user:{i}")).unwrap())
            .collect(),
    );
    let deadline = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let (store, limit, keyset) = (store.clone(), limit.clone(), keyset.clone());
            tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new(3).unwrap();
                let mut rng = StdRng::seed_from_u64(caller as u64);
                while Instant::now() < deadline {
                    let key = match keys {
                        Keys::Random => &keyset[rng.random_range(0..KEYS)],
                        Keys::Hot => &keyset[0],
                    };
                    let start = Instant::now();
                    store
                        .check_one(Request::new(key, &limit, 1), Timestamp::from_secs(0))
                        .await
                        .expect("decision");
                    hist.record(start.elapsed().as_nanos() as u64).unwrap();
                }
                hist
            })
        })
        .collect();
    let mut all = Histogram::<u64>::new(3).unwrap();
    for t in tasks {
        all.add(t.await.unwrap()).unwrap();
    }
    Run {
        per_sec: all.len() as f64 / secs as f64,
        p50_us: all.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: all.value_at_quantile(0.99) as f64 / 1000.0,
    }
}

/// `redis-benchmark` sending `FCALL` of the store's function library (loaded when the
/// store connected) with the arguments the store sends for one decision.
fn redis_benchmark(port: &str, limit: &Limit, keys: Keys, callers: usize, requests: u64) -> Run {
    let (_, function) = spillway_redis::function_library();
    // Keys of its own per algorithm: a key holds one algorithm's state.
    let name = limit.algorithm().name();
    let key = match keys {
        Keys::Random => format!("bench:{{rb:{name}:__rand_int__}}"),
        Keys::Hot => format!("bench:{{rb:{name}:hot}}"),
    };
    let mut args: Vec<String> = vec![
        "-p".into(),
        port.into(),
        "-c".into(),
        callers.to_string(),
        "-r".into(),
        KEYS.to_string(),
        "-n".into(),
        // As many calls as the store made, so both runs last about as long.
        requests.to_string(),
        "--precision".into(),
        "3".into(),
        "--csv".into(),
        "FCALL".into(),
        function.to_owned(),
        "1".into(),
        key,
    ];
    let any_key = Key::new("k").unwrap();
    args.extend(script_argv(
        &[Request::new(&any_key, limit, 1)],
        Timestamp::from_secs(1_800_000_000),
    ));
    let out = Command::new("redis-benchmark")
        .args(&args)
        .output()
        .expect("redis-benchmark runs");
    // CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let text = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("ERR") && !errors.contains("ERR"),
        "redis-benchmark got error replies: {errors}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("\"FCALL"))
        .unwrap_or_else(|| panic!("no result from redis-benchmark: {text}"));
    let cols: Vec<f64> = row
        .split(',')
        .skip(1)
        .map(|c| c.trim_matches('"').parse().unwrap())
        .collect();
    Run {
        per_sec: cols[0],
        p50_us: cols[3] * 1000.0,
        p99_us: cols[5] * 1000.0,
    }
}

/// `MEMORY USAGE` of one key per algorithm at typical limits, after enough traffic to
/// reach the state's steady size.
async fn bytes_per_key(url: &str) {
    let store = RedisStore::builder(url)
        .prefix("spillway:")
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let minute = Duration::from_secs(60);
    let sw = |precision| Algorithm::SlidingWindow {
        precision,
        edge: Edge::Strict,
    };
    let cases: Vec<(&str, Limit, u64)> = vec![
        (
            "gcra, 100/min",
            Limit::new(Algorithm::Gcra, 100, minute).unwrap(),
            10,
        ),
        (
            "token_bucket, 100/min",
            Limit::new(Algorithm::TokenBucket, 100, minute).unwrap(),
            10,
        ),
        (
            "fixed_window, 100/min",
            Limit::new(Algorithm::FixedWindow, 100, minute).unwrap(),
            10,
        ),
        (
            "sliding_window precision 1, 100/min",
            Limit::new(sw(1), 100, minute).unwrap(),
            10,
        ),
        (
            "sliding_window precision 60, 1000/min",
            Limit::new(sw(60), 1000, minute).unwrap(),
            600,
        ),
        (
            "sliding_log, 1000/hour, 1000 entries",
            Limit::new(Algorithm::SlidingLog, 1000, Duration::from_secs(3600)).unwrap(),
            1000,
        ),
    ];
    println!("| state | key | MEMORY USAGE bytes | per entry |");
    println!("|---|---|---|---|");
    for (what, limit, requests) in cases {
        let key = Key::new("user:12345").unwrap();
        let mut now = Timestamp::from_secs(1_800_000_000);
        store.reset(&key, &limit, now).await.unwrap();
        // Spread the requests over the window so sub-buckets and log entries fill.
        let step = Duration::from_micros(limit.window_micros() / requests);
        let mut last = now;
        for _ in 0..requests {
            store
                .check_one(Request::new(&key, &limit, 1), now)
                .await
                .unwrap();
            last = now;
            now = now.saturating_add(step);
        }
        // The key of the last request's window (a fixed window has one per window).
        let name = store.key_for(&key, &limit, last);
        let mut cmd = redis::cmd("MEMORY");
        cmd.arg("USAGE").arg(&name).arg("SAMPLES").arg(0);
        let Value::Int(bytes) = store.query(&cmd).await.unwrap() else {
            panic!("no MEMORY USAGE for {name}")
        };
        let per_entry = if limit.algorithm() == Algorithm::SlidingLog {
            format!("{:.1}", bytes as f64 / requests as f64)
        } else {
            "".into()
        };
        println!("| {what} | `{name}` | {bytes} | {per_entry} |");
        store.reset(&key, &limit, last).await.unwrap();
    }
}
