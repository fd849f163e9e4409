//! The service end to end over loopback, next to its ceilings: a trivial axum handler
//! that answers 200 and a trivial tonic `ShouldRateLimit` that answers OK, each served
//! by the same HTTP stack as the service and loaded by the same client in the same run.
//! Measures `POST /v1/check` (against the axum ceiling) and `ShouldRateLimit` (against
//! the tonic one) on the memory store and on Redis: throughput and p50/p99 latency of N
//! concurrent callers (closed loop).
//!
//! Run: `cargo bench -p spillway-server --bench service` (starts its own redis-server,
//! or uses `SPILLWAY_BENCH_REDIS=redis://…`). `BENCH_SECS` (default 3) per target,
//! `BENCH_CONCURRENCY` (default 32) callers, `BENCH_ONLY=http-memory` (or `grpc-redis`, …)
//! one target after the ceiling.

#![allow(clippy::disallowed_methods)]
// a benchmark reads the real clock
// The decision future nests the Redis client's futures (as the library says).
#![recursion_limit = "256"]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use spillway_core::{MemoryStore, SystemClock};
use spillway_redis::RedisStore;
use spillway_server::listen::{Limits, serve};
use spillway_server::{AnyStore, App, Config};
use tokio_util::sync::CancellationToken;

const KEYS: usize = 10_000;

const POLICY: &str = "
domain: bench
descriptors:
  - key: user
    limits: [{ algorithm: gcra, limit: 1000000000, window: 1s }]
";

struct Run {
    per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    errors: u64,
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let secs = env("BENCH_SECS", 3);
    let concurrency = env("BENCH_CONCURRENCY", 32) as usize;
    let (_redis, redis_url) = spillway_testkit::redis::bench_redis();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let duration = Duration::from_secs(secs);
        let shutdown = CancellationToken::new();
        let ceiling = trivial(shutdown.clone()).await;
        let grpc_ceiling = trivial_grpc(shutdown.clone()).await;
        let memory = spillway(AnyStore::Memory(MemoryStore::new())).await;
        let redis = spillway(AnyStore::Redis(
            RedisStore::builder(&redis_url).build().await.unwrap(),
        ))
        .await;

        println!(
            "{concurrency} concurrent callers, {secs} s each, {KEYS} keys, loopback, {} cores",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        println!(
            "{:<34} {:>12} {:>9} {:>9} {:>11} {:>7}",
            "target", "req/s", "p50 µs", "p99 µs", "of ceiling", "errors"
        );
        let ceiling_run = http(ceiling, "/", concurrency, duration, false).await;
        report(
            "trivial axum handler (ceiling)",
            &ceiling_run,
            ceiling_run.per_sec,
        );
        let grpc_ceiling_run = grpc(grpc_ceiling, concurrency, duration).await;
        report(
            "trivial tonic handler (ceiling)",
            &grpc_ceiling_run,
            grpc_ceiling_run.per_sec,
        );
        let only = std::env::var("BENCH_ONLY").unwrap_or_default();
        for (name, addrs) in [("memory", &memory), ("redis", &redis)] {
            let wanted = |api: &str| only.is_empty() || only == format!("{api}-{name}");
            if wanted("http") {
                let r = http(addrs.0, "/v1/check", concurrency, duration, true).await;
                report(&format!("POST /v1/check, {name}"), &r, ceiling_run.per_sec);
            }
            if wanted("grpc") {
                let r = grpc(addrs.1, concurrency, duration).await;
                report(
                    &format!("ShouldRateLimit, {name}"),
                    &r,
                    grpc_ceiling_run.per_sec,
                );
            }
        }
        shutdown.cancel();
        in_process().await;
    });
}

/// A service of the bench's policies on a memory store of its own, deciding in process.
fn in_process_service() -> spillway_server::Service {
    let dir = std::env::temp_dir().join(format!("spillway-bench-{}", std::process::id()));
    let stores = spillway_server::Stores::new(
        AnyStore::Memory(MemoryStore::new()),
        spillway_server::Breaker::new(5, Duration::from_millis(500)),
    );
    spillway_server::Service::new(
        spillway_policy::load(&dir).unwrap(),
        stores,
        Arc::new(SystemClock),
        Default::default(),
    )
}

/// Where the time goes: the service alone, without HTTP, on one task.
async fn in_process() {
    let service = in_process_service();
    let requests: Vec<spillway_server::Valid> = (0..KEYS)
        .map(|i| spillway_server::CheckRequest {
            domain: "bench".into(),
            descriptors: vec![spillway_server::Descriptor {
                entries: vec![("user".into(), format!("u{i}"))],
                ..Default::default()
            }],
            hits: 1,
            ..Default::default()
        })
        .map(|r| r.validate().expect("a valid request"))
        .collect();
    println!(
        "Service::check future: {} bytes",
        std::mem::size_of_val(&service.check(&requests[0]))
    );
    let n = 1_000_000;
    let start = Instant::now();
    for i in 0..n {
        let r = service.check(&requests[i % KEYS]).await.unwrap();
        assert_eq!(r.overall, spillway_server::Code::Ok);
    }
    let per = start.elapsed() / n as u32;
    println!("Service::check in process, memory store, one task: {per:?} per decision");
    let service = Arc::new(service);
    let requests = Arc::new(requests);
    let start = Instant::now();
    let tasks: Vec<_> = (0..2)
        .map(|t| {
            let (service, requests) = (Arc::clone(&service), Arc::clone(&requests));
            tokio::spawn(async move {
                for i in 0..n {
                    let r = service
                        .check(&requests[(i + t * 5000) % KEYS])
                        .await
                        .unwrap();
                    assert_eq!(r.overall, spillway_server::Code::Ok);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let per = start.elapsed() / (2 * n) as u32;
    println!("Service::check in process, memory store, two tasks: {per:?} per decision (wall)");
    with_overrides(&service, n).await;
}

/// The same decisions with a million overrides (limits set as data) loaded: on paths
/// that have one, and on paths that do not (the policy file's rule, after a lookup that
/// misses), beside `plain` (the service above, none), in turns in one process (three
/// rounds: the heap a million overrides leave is every row's). `BENCH_OVERRIDES` sets
/// how many (default 1,000,000).
async fn with_overrides(plain: &spillway_server::Service, n: usize) {
    let count = env("BENCH_OVERRIDES", 1_000_000) as usize;
    let limits =
        serde_json::json!([{ "algorithm": "gcra", "limit": 1_000_000_000, "window": "1s" }]);
    let rss = || {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_owned();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .unwrap_or(0)
    };
    let service = in_process_service();
    let all: Vec<_> = (0..count)
        .map(|i| (vec![("user".into(), format!("u{i}"))], limits.clone()))
        .collect();
    let before = rss();
    let start = Instant::now();
    service.set_overrides("bench", &all).unwrap();
    let took = start.elapsed();
    drop(all);
    let grown = rss().saturating_sub(before);
    // More, one at a time: what a change costs with the domain full (the first after
    // the big one pays the allocator's tidying of what the load freed: not counted).
    let more = |i: usize| [("user".to_owned(), format!("one-more-{i}"))];
    service.set_override("bench", &more(0), &limits).unwrap();
    let start = Instant::now();
    for i in 1..=100 {
        service.set_override("bench", &more(i), &limits).unwrap();
    }
    println!(
        "one more override set alone in {:?} each",
        start.elapsed() / 100
    );
    println!(
        "{count} overrides set in one change in {took:?} ({:?} each), RSS +{} MB ({} bytes each)",
        took / count.max(1) as u32,
        grown / 1024,
        grown * 1024 / count.max(1) as u64
    );
    let requests = |prefix: &str| -> Vec<spillway_server::Valid> {
        (0..KEYS)
            .map(|i| spillway_server::CheckRequest {
                domain: "bench".into(),
                descriptors: vec![spillway_server::Descriptor {
                    entries: vec![("user".into(), format!("{prefix}{i}"))],
                    ..Default::default()
                }],
                hits: 1,
                ..Default::default()
            })
            .map(|r| r.validate().expect("a valid request"))
            .collect()
    };
    let (overridden, not) = (requests("u"), requests("x"));
    // A service without overrides made now, beside the one made first: what the heap
    // the million left costs a decision that never looks at them.
    let after = in_process_service();
    let rows = [
        ("no overrides", plain, &overridden),
        (
            "no overrides, a service made after the million",
            &after,
            &overridden,
        ),
        ("paths not overridden", &service, &not),
        ("paths overridden", &service, &overridden),
    ];
    let mut per: Vec<Vec<Duration>> = vec![Vec::new(); rows.len()];
    // `BENCH_ROUNDS` rounds counted (default 5), after the one that warms the keys.
    let rounds = env("BENCH_ROUNDS", 5) as usize;
    for round in 0..=rounds {
        for (row, (_, service, requests)) in rows.iter().enumerate() {
            // `BENCH_ROW=2`: that row alone (for a profile of it).
            if std::env::var("BENCH_ROW").is_ok_and(|r| r != row.to_string()) {
                continue;
            }
            let start = Instant::now();
            for i in 0..n {
                let r = service.check(&requests[i % KEYS]).await.unwrap();
                assert_eq!(r.overall, spillway_server::Code::Ok);
            }
            // The first round warms the keys: not counted.
            if round > 0 {
                per[row].push(start.elapsed() / n as u32);
            }
        }
    }
    // The lookup alone, as a library asks it (`Service::override_limit`: the snapshot,
    // the domain, the path; on a hit its plan's limit, cloned).
    for (what, prefix) in [("overridden", "u"), ("not overridden", "x")] {
        let paths: Vec<String> = (0..KEYS).map(|i| format!("{prefix}{i}")).collect();
        let start = Instant::now();
        let mut found = 0;
        for i in 0..n {
            let path = [("user", paths[i % KEYS].as_str())];
            found += usize::from(service.override_limit("bench", &path, "").is_some());
        }
        assert_eq!(found > 0, prefix == "u");
        println!(
            "Service::override_limit among {count} overrides, paths {what}: {:?} a lookup",
            start.elapsed() / n as u32
        );
    }
    // Each row's median round, and its ratio to the first row's (no overrides).
    let median = |runs: &[Duration]| {
        let mut sorted = runs.to_vec();
        sorted.sort();
        sorted.get(sorted.len() / 2).copied()
    };
    let none = median(&per[0]);
    for ((what, ..), runs) in rows.iter().zip(&per) {
        let ratio = match (median(runs), none) {
            (Some(m), Some(none)) => format!(
                "median {m:?}, {:.2}× no overrides",
                m.as_secs_f64() / none.as_secs_f64()
            ),
            _ => String::new(),
        };
        println!(
            "Service::check in process, memory store, one task, {count} overrides loaded, {what}: {runs:?} per decision; {ratio}"
        );
    }
}

fn report(name: &str, r: &Run, ceiling: f64) {
    println!(
        "{name:<34} {:>12.0} {:>9.0} {:>9.0} {:>10.0}% {:>7}",
        r.per_sec,
        r.p50_us,
        r.p99_us,
        100.0 * r.per_sec / ceiling,
        r.errors
    );
}

/// The ceiling: a handler that answers 200, on the same accept loop as the service.
async fn trivial(shutdown: CancellationToken) -> SocketAddr {
    on_the_accept_loop(spillway_server::ceiling::http(), shutdown).await
}

/// The gRPC ceiling: `ShouldRateLimit` answering OK without looking at the request,
/// through tonic's routes on the same accept loop as the service's gRPC port.
async fn trivial_grpc(shutdown: CancellationToken) -> SocketAddr {
    on_the_accept_loop(spillway_server::ceiling::grpc(), shutdown).await
}

async fn on_the_accept_loop(app: axum::Router, shutdown: CancellationToken) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let timeouts = Limits {
        drain: Duration::from_secs(1),
        ..Limits::new("trivial")
    };
    tokio::spawn(serve(listener, app, shutdown, timeouts, None));
    addr
}

/// A service on `store`; its HTTP and gRPC addresses.
async fn spillway(store: AnyStore) -> (SocketAddr, SocketAddr) {
    let dir = std::env::temp_dir().join(format!("spillway-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bench.yaml"), POLICY).unwrap();
    let mut config = Config::ephemeral(dir);
    config.rules.watch = false;
    let running = App::builder(config)
        .store(store)
        .clock(Arc::new(SystemClock))
        .build()
        .await
        .unwrap()
        .start()
        .await
        .unwrap();
    let addrs = (running.http_addr, running.grpc_addr);
    std::mem::forget(running); // serves until the process ends
    addrs
}

fn body(i: usize) -> Bytes {
    Bytes::from(format!(
        r#"{{"domain":"bench","descriptors":[{{"entries":[{{"key":"user","value":"u{i}"}}]}}]}}"#
    ))
}

/// Closed loop over HTTP/1.1 keep-alive: one connection per caller.
async fn http(
    addr: SocketAddr,
    path: &'static str,
    concurrency: usize,
    duration: Duration,
    expect_json: bool,
) -> Run {
    let bodies: Arc<Vec<Bytes>> = Arc::new((0..KEYS).map(body).collect());
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|c| {
            let bodies = Arc::clone(&bodies);
            tokio::spawn(async move {
                let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .unwrap();
                tokio::spawn(conn);
                let mut hist = Histogram::<u64>::new(3).unwrap();
                let (mut n, mut errors) = (c * 7919, 0);
                while start.elapsed() < duration {
                    let req = hyper::Request::post(path)
                        .header("host", "bench")
                        .header("content-type", "application/json")
                        .body(Full::new(bodies[n % KEYS].clone()))
                        .unwrap();
                    n += 1;
                    let t = Instant::now();
                    let ok = match sender.send_request(req).await {
                        Ok(resp) => {
                            let ok = resp.status().is_success();
                            let body = resp.into_body().collect().await.map(|b| b.to_bytes());
                            ok && body
                                .is_ok_and(|b| !expect_json || b.starts_with(b"{\"allowed\":true"))
                        }
                        Err(_) => false,
                    };
                    hist.record(t.elapsed().as_micros() as u64).unwrap();
                    errors += u64::from(!ok);
                }
                (hist, errors)
            })
        })
        .collect();
    collect(tasks, start).await
}

/// Closed loop over gRPC: callers share 4 HTTP/2 connections, as Envoy multiplexes.
async fn grpc(addr: SocketAddr, concurrency: usize, duration: Duration) -> Run {
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(
            RateLimitServiceClient::connect(format!("http://{addr}"))
                .await
                .unwrap(),
        );
    }
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|c| {
            let mut client = channels[c % channels.len()].clone();
            tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new(3).unwrap();
                let (mut n, mut errors) = (c * 7919, 0);
                while start.elapsed() < duration {
                    let req = RateLimitRequest {
                        domain: "bench".into(),
                        descriptors: vec![RateLimitDescriptor {
                            entries: vec![Entry {
                                key: "user".into(),
                                value: format!("u{}", n % KEYS),
                            }],
                            ..Default::default()
                        }],
                        hits_addend: 1,
                    };
                    n += 1;
                    let t = Instant::now();
                    let ok = client
                        .should_rate_limit(req)
                        .await
                        .is_ok_and(|r| r.into_inner().overall_code == 1);
                    hist.record(t.elapsed().as_micros() as u64).unwrap();
                    errors += u64::from(!ok);
                }
                (hist, errors)
            })
        })
        .collect();
    collect(tasks, start).await
}

async fn collect(
    tasks: Vec<tokio::task::JoinHandle<(Histogram<u64>, u64)>>,
    start: Instant,
) -> Run {
    let mut all = Histogram::<u64>::new(3).unwrap();
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await.unwrap();
        all.add(h).unwrap();
        errors += e;
    }
    Run {
        per_sec: all.len() as f64 / start.elapsed().as_secs_f64(),
        p50_us: all.value_at_quantile(0.5) as f64,
        p99_us: all.value_at_quantile(0.99) as f64,
        errors,
    }
}
