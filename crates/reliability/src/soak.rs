//! A soak of native rules on Redis at an everyday rate: open-loop load on `/v1/check`
//! from many users, each request decided by a `gcra` 100 per second and a
//! `sliding_window` 100,000 per hour of precision 60 at once, for minutes; Redis frozen
//! once in the middle (SIGSTOP on a server of its own, `DEBUG SLEEP` on one given by
//! URL). Reported per interval: latency percentiles, store timeouts, breaker openings
//! and the calls it refused, answers not decided by the store (fallbacks), and the
//! process's memory and open files (the service runs in this process, on a runtime of
//! its own; the load generator on another).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use spillway_redis::RedisStore;
use spillway_server::{App, Config, Running};
use spillway_testkit::redis::RedisServer;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::load::{self, Sample};

/// The soak's policy: two native rules on every request, keyed by user.
pub const POLICY: &str = "domain: soak
descriptors:
  - key: user
    limits:
      - name: per-second
        algorithm: gcra
        limit: 100
        window: 1s
      - name: per-hour
        algorithm: sliding_window
        limit: 100000
        window: 1h
        precision: 60
";

/// How long to soak, and how hard (`spillway-reliability soak`'s flags).
#[derive(clap::Args, Clone, Debug)]
pub struct Soak {
    /// A Redis URL, frozen by `DEBUG SLEEP` (default: a redis-server of its own on a free
    /// port, `hz 100`, frozen by SIGSTOP).
    #[arg(long)]
    pub store: Option<String>,
    /// Requests a second, sent whether or not earlier ones have answered.
    #[arg(long, default_value_t = 3000)]
    pub rate: u32,
    /// Users drawn from, uniformly (a key per user and rule).
    #[arg(long, default_value_t = 1_000_000)]
    pub users: u64,
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub length: Duration,
    /// How long Redis is frozen, once, in the middle (0s: never).
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub freeze: Duration,
    /// A row every this long.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub every: Duration,
    /// Stop this whole process (service and load generator, not Redis) for this long
    /// every `--stall-every`, as a busy machine's scheduler does (0s: never). A child
    /// `sh` sends SIGSTOP, then SIGCONT.
    #[arg(long, default_value = "0s", value_parser = duration)]
    pub stall: Duration,
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub stall_every: Duration,
    /// A service setting, KEY=VALUE (the settings file's keys), over the defaults.
    #[arg(long = "set", value_parser = key_value)]
    pub settings: Vec<(String, String)>,
}

fn duration(s: &str) -> Result<Duration, String> {
    spillway_server::config::value::duration(s)
}

fn key_value(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))?;
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

/// One interval's figures (the last row: the whole run).
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// The interval's end, from the start.
    pub end: Duration,
    pub requests: u64,
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub max: Duration,
    /// Store calls that timed out.
    pub timeouts: u64,
    /// Times the breaker opened.
    pub opened: u64,
    /// Calls the open breaker kept from the store.
    pub refused: u64,
    /// Answers the store did not decide: a failure policy's (degraded, 503) or none.
    pub fallbacks: u64,
    /// At the interval's end: resident memory, heap in use, open files.
    pub rss_kib: u64,
    pub heap_kib: i64,
    pub fds: u64,
    /// CPU time the machine lost to other guests of its host (steal), in ms.
    pub stolen_ms: u64,
}

/// The rows, the whole run, and the fallbacks outside the freeze: answered before it
/// began, or sent more than a second after it ended (a call in flight when Redis
/// stopped met the freeze, whenever it was sent).
#[derive(Debug)]
pub struct Report {
    pub rows: Vec<Row>,
    pub total: Row,
    pub freeze: Option<(Duration, Duration)>,
    pub fallbacks_outside_freeze: u64,
    /// The fallbacks by what was answered (`Unavailable`, `Allowed { degraded: true, … }`,
    /// `Transport`, …), most first.
    pub fallback_answers: Vec<(String, u64)>,
    /// How many times this process was stopped (`--stall`), and for how long each.
    pub stalls: (u32, Duration),
    /// Redis's own pauses of 2 ms or more by event (`LATENCY LATEST`: `command`,
    /// `expire-cycle`, …), the longest of each, in ms; empty where the latency
    /// monitor is off (a given store that did not turn it on).
    pub redis_pauses: Vec<(String, u64)>,
    /// What Redis spent on the run's decisions (`INFO commandstats` before and after;
    /// `None` where it would not say).
    pub redis_spent: Option<Spent>,
}

/// Redis's calls of the decision code over a run, and its time in them.
#[derive(Debug, Clone, Copy)]
pub struct Spent {
    pub calls: u64,
    /// Requests (each a batch of the two rules) a call.
    pub per_call: f64,
    /// Redis's time a call, in µs (`usec_per_call` over the run).
    pub usec_per_call: f64,
    /// Redis's time a request, in µs.
    pub usec_per_request: f64,
    /// Redis's CPU (user and system) a request, in µs.
    pub cpu_per_request: f64,
}

/// The soak's own `redis-server`: `hz 100`, as docs/stores.md advises for rate limits
/// (at the default 10, expiring the `gcra` keys of a million users paused Redis for up
/// to 12 ms at a time, each pause a round of store timeouts); and Redis's latency
/// monitor on, for the report's pauses of Redis itself.
pub const OWN_REDIS: &[&str] = &["--hz", "100", "--latency-monitor-threshold", "2"];

/// Runs the soak on a `redis-server` of its own, or on its `store` (a Redis URL).
pub async fn run(soak: Soak) -> anyhow::Result<Report> {
    let own = soak
        .store
        .is_none()
        .then(|| RedisServer::start_with(OWN_REDIS));
    let url = soak
        .store
        .clone()
        .unwrap_or_else(|| own.as_ref().expect("started").url());
    let stats = RedisStore::connect(&url).await.ok();
    let stats_before = match &stats {
        Some(store) => store.server_stats().await.ok(),
        None => None,
    };
    let service = Service::start(&url, &soak.settings)?;
    let check = Check::new(service.running.http_addr, soak.users)?;
    let metrics_url = format!(
        "http://{}/metrics",
        service.running.admin_addr.expect("the admin listener")
    );

    let stolen_at_start = crate::stolen_ms();
    let start = Instant::now();
    let (tx, rx) = mpsc::unbounded_channel();
    let (_end, until) = watch::channel(start + soak.length);
    let load = tokio::spawn(load::send_until(
        soak.rate,
        start,
        until,
        move || check.call(),
        tx,
    ));
    let intervals = soak
        .length
        .as_nanos()
        .div_ceil(soak.every.as_nanos().max(1)) as u32;
    let tally = tokio::spawn(tally(rx, soak.every, intervals as usize));

    // The freeze, centred on the middle of the run.
    let freeze = (!soak.freeze.is_zero()).then(|| {
        let from = soak.length.saturating_sub(soak.freeze) / 2;
        (from, from + soak.freeze)
    });
    let freezing = async {
        let Some((from, to)) = freeze else { return };
        tokio::time::sleep_until(start + from).await;
        match &own {
            Some(server) => server.signal("STOP"),
            None => debug_sleep(&url, to - from).await,
        }
        tokio::time::sleep_until(start + to).await;
        if let Some(server) = &own {
            server.signal("CONT");
        }
    };

    // The service's counters and the process's memory at each interval's end.
    let reading = async {
        let reader = reqwest::Client::new();
        let mut marks = Vec::new();
        for i in 1..=intervals {
            tokio::time::sleep_until(start + soak.every * i).await;
            marks.push(Mark::read(&reader, &metrics_url).await);
        }
        marks
    };
    // The stalls of this process, if asked: one every `stall_every` until the end.
    let stalling = async {
        if soak.stall.is_zero() || soak.stall_every.is_zero() {
            return 0;
        }
        let mut stalls = 0;
        let mut at = start + soak.stall_every;
        while at + soak.stall < start + soak.length {
            tokio::time::sleep_until(at).await;
            let (pid, seconds) = (std::process::id(), soak.stall.as_secs_f64());
            let script = format!("kill -STOP {pid}; sleep {seconds}; kill -CONT {pid}");
            let stalled = tokio::task::spawn_blocking(move || {
                std::process::Command::new("sh")
                    .args(["-c", &script])
                    .status()
            });
            if matches!(stalled.await, Ok(Ok(s)) if s.success()) {
                stalls += 1;
            }
            at += soak.stall_every;
        }
        stalls
    };
    let ((), marks, stalls) = tokio::join!(freezing, reading, stalling);
    load.await?;
    let (mut rows, mut total, fallbacks) = tally.await?;
    let mut before = Mark::default();
    for (row, mark) in rows.iter_mut().zip(&marks) {
        // A failed read of the counters is all zeros: the next row is not negative.
        row.timeouts = mark.timeouts.saturating_sub(before.timeouts);
        row.opened = mark.opened.saturating_sub(before.opened);
        row.refused = mark.refused.saturating_sub(before.refused);
        (row.rss_kib, row.heap_kib, row.fds) = (mark.rss_kib, mark.heap_kib, mark.fds);
        row.stolen_ms = mark
            .stolen_ms
            .saturating_sub(before.stolen_ms.max(stolen_at_start));
        before = *mark;
    }
    (total.timeouts, total.opened, total.refused) =
        (before.timeouts, before.opened, before.refused);
    (total.rss_kib, total.heap_kib, total.fds) = (before.rss_kib, before.heap_kib, before.fds);
    total.stolen_ms = before.stolen_ms.saturating_sub(stolen_at_start);
    total.end = soak.length;
    service.stop().await;
    let redis_pauses = redis_pauses(&url).await;
    let redis_spent = match (&stats, stats_before) {
        (Some(store), Some(before)) => store.server_stats().await.ok().and_then(|after| {
            let calls = after.decision_calls.checked_sub(before.decision_calls)?;
            let usec = after.decision_usec.checked_sub(before.decision_usec)? as f64;
            let requests = total.requests.max(1) as f64;
            (calls > 0).then(|| Spent {
                calls,
                per_call: requests / calls as f64,
                usec_per_call: usec / calls as f64,
                usec_per_request: usec / requests,
                cpu_per_request: (after.cpu_seconds - before.cpu_seconds) * 1e6 / requests,
            })
        }),
        _ => None,
    };
    let outside = |s: &Sample| match freeze {
        Some((from, to)) => s.done() < from || s.sent > to + Duration::from_secs(1),
        None => true,
    };
    let mut answers = std::collections::BTreeMap::<String, u64>::new();
    for s in &fallbacks {
        *answers.entry(format!("{:?}", s.answer)).or_default() += 1;
    }
    let mut fallback_answers: Vec<(String, u64)> = answers.into_iter().collect();
    fallback_answers.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    Ok(Report {
        rows,
        total,
        freeze,
        fallbacks_outside_freeze: fallbacks.iter().filter(|s| outside(s)).count() as u64,
        fallback_answers,
        stalls: (stalls, soak.stall),
        redis_pauses,
        redis_spent,
    })
}

/// The service, on a runtime of its own (two workers), so the load generator's tasks
/// do not queue behind its work nor it behind theirs.
struct Service {
    runtime: tokio::runtime::Runtime,
    running: Running,
    dir: std::path::PathBuf,
}

impl Service {
    fn start(url: &str, settings: &[(String, String)]) -> anyhow::Result<Service> {
        let dir = std::env::temp_dir().join(format!("spillway-soak-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("rules"))?;
        std::fs::write(dir.join("rules/soak.yaml"), POLICY)?;
        let file = dir.join("settings.yaml");
        let lines: String = settings
            .iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        std::fs::write(&file, lines)?;
        let sources = spillway_server::config::Sources {
            file: Some(file),
            ..Default::default()
        };
        let mut config = sources.resolve()?.config;
        let ephemeral = Config::ephemeral(dir.join("rules"));
        (config.listen, config.admin, config.rules.path) =
            (ephemeral.listen, ephemeral.admin, ephemeral.rules.path);
        config.store.url = url.to_owned();
        config.rules.watch = false;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        // Started from a thread of its own: this one is inside the load's runtime.
        let started = std::thread::scope(|s| {
            s.spawn(|| {
                runtime.block_on(async { App::builder(config).build().await?.start().await })
            })
            .join()
            .expect("the service starts without a panic")
        });
        let running = match started {
            Ok(running) => running,
            Err(e) => {
                // A runtime is not dropped inside another.
                runtime.shutdown_background();
                return Err(e.into());
            }
        };
        Ok(Service {
            runtime,
            running,
            dir,
        })
    }

    async fn stop(self) {
        let Service {
            runtime,
            running,
            dir,
        } = self;
        let _ = runtime.spawn(running.stop()).await;
        runtime.shutdown_background();
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// `/v1/check` for a user drawn at random (xorshift: no two requests need to differ,
/// only the users to spread).
#[derive(Clone)]
struct Check {
    client: reqwest::Client,
    url: Arc<str>,
    users: u64,
    seed: Arc<AtomicU64>,
}

impl Check {
    fn new(addr: std::net::SocketAddr, users: u64) -> anyhow::Result<Check> {
        Ok(Check {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
            url: format!("http://{addr}/v1/check").into(),
            users: users.max(1),
            seed: Arc::new(AtomicU64::new(0x9e37_79b9_7f4a_7c15)),
        })
    }

    fn call(&self) -> impl std::future::Future<Output = load::Answer> + Send + use<> {
        let mut x = self
            .seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        let body = format!(
            r#"{{"domain":"soak","descriptors":[{{"entries":[{{"key":"user","value":"u{}"}}]}}]}}"#,
            x % self.users
        );
        let (client, url) = (self.client.clone(), Arc::clone(&self.url));
        async move { load::ask(&client, &url, body.into_bytes()).await }
    }
}

/// The samples into rows by sending time; the fallbacks themselves.
async fn tally(
    mut rx: mpsc::UnboundedReceiver<Sample>,
    every: Duration,
    intervals: usize,
) -> (Vec<Row>, Row, Vec<Sample>) {
    let histogram = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut rows: Vec<(Row, Histogram<u64>)> = (1..=intervals.max(1) as u32)
        .map(|i| {
            (
                Row {
                    end: every * i,
                    ..Row::default()
                },
                histogram(),
            )
        })
        .collect();
    let mut all = (Row::default(), histogram());
    let mut fallbacks = Vec::new();
    while let Some(s) = rx.recv().await {
        // A call sent on the run's last tick belongs to the last interval.
        let i = ((s.sent.as_nanos() / every.as_nanos().max(1)) as usize).min(rows.len() - 1);
        let fallback = !s.answer.store_backed();
        if fallback {
            fallbacks.push(s);
        }
        for (row, h) in [&mut rows[i], &mut all] {
            row.requests += 1;
            row.fallbacks += u64::from(fallback);
            let _ = h.record(s.latency.as_micros() as u64);
        }
    }
    let finish = |(mut row, h): (Row, Histogram<u64>)| {
        let at = |q: f64| Duration::from_micros(h.value_at_quantile(q));
        (row.p50, row.p99, row.p999) = (at(0.5), at(0.99), at(0.999));
        row.max = Duration::from_micros(h.max());
        row
    };
    (
        rows.into_iter().map(finish).collect(),
        finish(all),
        fallbacks,
    )
}

/// The service's store counters (the main store) and the process's memory, at a moment.
#[derive(Clone, Copy, Debug, Default)]
struct Mark {
    timeouts: u64,
    opened: u64,
    refused: u64,
    rss_kib: u64,
    heap_kib: i64,
    fds: u64,
    stolen_ms: u64,
}

impl Mark {
    async fn read(client: &reqwest::Client, url: &str) -> Mark {
        let text = match client.get(url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let sum = |name: &str, label: &str| -> u64 {
            text.lines()
                .filter(|l| {
                    l.starts_with(name) && l.contains(label) && l.contains(r#"store="main""#)
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        };
        Mark {
            timeouts: sum("spillway_store_errors_total{", r#"kind="timeout""#),
            opened: sum("spillway_breaker_opened_total{", ""),
            refused: sum("spillway_store_errors_total{", r#"kind="breaker_open""#),
            rss_kib: crate::rss_kib(),
            heap_kib: crate::heap_bytes() / 1024,
            fds: crate::open_fds(),
            stolen_ms: crate::stolen_ms(),
        }
    }
}

/// Redis's `LATENCY LATEST`: each event's longest pause, in ms. Its own pauses show
/// whether a store timeout was Redis's (the freeze's `SIGSTOP` leaves none: a stopped
/// process measures nothing).
async fn redis_pauses(url: &str) -> Vec<(String, u64)> {
    let Ok(client) = redis::Client::open(url) else {
        return Vec::new();
    };
    let Ok(mut c) = client.get_multiplexed_async_connection().await else {
        return Vec::new();
    };
    let latest: redis::RedisResult<Vec<(String, u64, u64, u64)>> = redis::cmd("LATENCY")
        .arg("LATEST")
        .query_async(&mut c)
        .await;
    latest
        .map(|events| {
            events
                .into_iter()
                .map(|(event, _, _, max)| (event, max))
                .collect()
        })
        .unwrap_or_default()
}

/// `DEBUG SLEEP` on a server given by URL (its `enable-debug-command` must allow it).
async fn debug_sleep(url: &str, length: Duration) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    if let Ok(mut c) = client.get_multiplexed_async_connection().await {
        let _: redis::RedisResult<()> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(length.as_secs_f64())
            .query_async(&mut c)
            .await;
    }
}

/// The table's header.
pub const HEADER: &str = "| at | requests | p50 ms | p99 ms | p99.9 ms | max ms | store timeouts | breaker opened | calls it refused | fallbacks | RSS MiB | heap MiB | fds |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";

impl std::fmt::Display for Row {
    /// One Markdown table row.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "| {}s | {} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} | {:.1} | {:.1} | {} |",
            self.end.as_secs(),
            self.requests,
            ms(self.p50),
            ms(self.p99),
            ms(self.p999),
            ms(self.max),
            self.timeouts,
            self.opened,
            self.refused,
            self.fallbacks,
            self.rss_kib as f64 / 1024.0,
            self.heap_kib as f64 / 1024.0,
            self.fds
        )
    }
}

impl std::fmt::Display for Report {
    /// The table, the whole run as its last row (`all`), and the freeze.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{HEADER}")?;
        for row in &self.rows {
            writeln!(f, "{row}")?;
        }
        let total = self.total.to_string();
        let at = format!("| {}s |", self.total.end.as_secs());
        writeln!(f, "{}", total.replacen(&at, "| all |", 1))?;
        if let Some((from, to)) = self.freeze {
            write!(
                f,
                "\nRedis frozen from {:.1} s to {:.1} s; fallbacks outside it and the second after: {}",
                from.as_secs_f64(),
                to.as_secs_f64(),
                self.fallbacks_outside_freeze
            )?;
        }
        if !self.redis_pauses.is_empty() {
            let pauses: Vec<String> = (self.redis_pauses.iter())
                .map(|(event, max)| format!("{event} {max} ms"))
                .collect();
            write!(f, "\nRedis's own longest pauses: {}", pauses.join(", "))?;
        }
        if let Some(spent) = self.redis_spent {
            write!(
                f,
                "\nRedis ran {} decision calls: {:.2} requests a call, {:.1} µs a call, {:.1} µs a request; its CPU {:.1} µs a request",
                spent.calls,
                spent.per_call,
                spent.usec_per_call,
                spent.usec_per_request,
                spent.cpu_per_request
            )?;
        }
        if self.total.stolen_ms > 0 {
            let rows: Vec<String> = (self.rows.iter())
                .filter(|r| r.stolen_ms > 0)
                .map(|r| format!("{} ms to {} s", r.stolen_ms, r.end.as_secs()))
                .collect();
            write!(
                f,
                "\nThe machine lost {} ms of CPU to other guests of its host (steal): {}",
                self.total.stolen_ms,
                rows.join(", ")
            )?;
        }
        if self.stalls.0 > 0 {
            write!(
                f,
                "\nThis process stopped {} times, {:?} each",
                self.stalls.0, self.stalls.1
            )?;
        }
        if !self.fallback_answers.is_empty() {
            let answers: Vec<String> = self
                .fallback_answers
                .iter()
                .map(|(answer, n)| format!("{n} {answer}"))
                .collect();
            write!(f, "\nFallbacks by answer: {}", answers.join(", "))?;
        }
        Ok(())
    }
}
