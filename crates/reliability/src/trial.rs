//! One trial: a real `redis-server` behind the TCP proxy (or a Cluster of its own),
//! plaintext or TLS, a Spillway service on it with one failure policy, steady load,
//! one fault in the middle; then the samples judged against what that policy promises.

use std::fmt;
use std::time::Duration;

use spillway_server::{App, Config, Running};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fault::{Fault, Rig, Transport};
use crate::load::{self, Answer, Sample, certain_most};

/// The limit under test: exact, so any over-admission is a bug.
pub const LIMIT: u64 = 100;
/// Its window.
pub const WINDOW: Duration = Duration::from_secs(1);

/// What a rule does when the store fails (or that it is in shadow mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// `on_store_error: open`: let through.
    Open,
    /// `on_store_error: closed`: 503, never a 429.
    Closed,
    /// `on_store_error: local`: an in-process limiter with the same rule.
    Local,
    /// `mode: shadow`: never deny, whatever happens.
    Shadow,
}

impl Policy {
    pub const ALL: [Policy; 4] = [Policy::Open, Policy::Closed, Policy::Local, Policy::Shadow];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Open => "open",
            Policy::Closed => "closed",
            Policy::Local => "local",
            Policy::Shadow => "shadow",
        }
    }

    /// The policy file: one `sliding_log` rule, [`LIMIT`] per [`WINDOW`], on `user`.
    pub fn yaml(self) -> String {
        let mode = match self {
            Policy::Shadow => "    mode: shadow\n".to_string(),
            other => format!("    on_store_error: {}\n", other.name()),
        };
        format!(
            "domain: reliability\ndescriptors:\n  - key: user\n{mode}    limits:\n      \
             - name: per-second\n        algorithm: sliding_log\n        limit: {LIMIT}\n        \
             window: {}ms\n",
            WINDOW.as_millis()
        )
    }
}

impl std::str::FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Policy, String> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown policy `{s}` (expected open, closed, local or shadow)"))
    }
}

/// How long each phase lasts and how hard the load pushes.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Load before the fault.
    pub before: Duration,
    /// The fault.
    pub fault: Duration,
    /// Load after the fault is healed.
    pub after: Duration,
    /// Requests per second (twice the limit by default: half are denied).
    pub rate: u32,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            before: Duration::from_secs(1),
            fault: Duration::from_secs(2),
            after: Duration::from_secs(2),
            rate: 2 * LIMIT as u32,
        }
    }
}

/// What a trial measured.
#[derive(Clone, Debug)]
pub struct Report {
    pub fault: Fault,
    pub policy: Policy,
    pub transport: Transport,
    pub requests: usize,
    /// Answers that broke the policy's promise, and admissions past the limit.
    pub violations: usize,
    /// A few of them, described.
    pub examples: Vec<String>,
    /// Latency of the requests sent during the fault.
    pub p99: Duration,
    pub max: Duration,
    /// From the fault's end to the first store-backed answer.
    pub recovery: Option<Duration>,
    /// 503s, other statuses and transport errors callers saw.
    pub errors: usize,
    /// Resident memory before and after the trial, in KiB.
    pub rss_kib: (u64, u64),
}

/// Runs one trial.
pub async fn run(
    fault: Fault,
    policy: Policy,
    transport: Transport,
    timing: Timing,
) -> anyhow::Result<Report> {
    let mut rig = Rig::start(fault, transport).await?;
    let mut settings = service_settings(
        &format!("{fault}-{}", policy.name()),
        policy,
        rig.store_url(),
    )?;
    settings.store.redis = rig.access();
    let running = start(settings.clone()).await?;
    let check = load::HttpCheck::new(running.http_addr, "u1")?;
    let call = move || check.call();

    let rss_before = crate::rss_kib();
    let start = Instant::now();
    // The load goes on until `after` past the fault's healing, however long that took
    // (a promotion waits for the cluster's node timeout): no end is set until then.
    let (end, until) = watch::channel(start + Duration::from_secs(3600));
    let load = tokio::spawn(load::drive_until(timing.rate, start, until, call));
    tokio::time::sleep(timing.before).await;
    let fault_start = start.elapsed();
    fault.run(&mut rig, timing.fault).await?;
    let healed = start.elapsed();
    end.send_replace(start + healed + timing.after);
    let samples = load.await?;
    let rss_after = crate::rss_kib();

    running.stop().await;
    let _ = std::fs::remove_dir_all(&settings.rules.path);
    Ok(Report {
        transport,
        ..judge(
            fault,
            policy,
            &samples,
            (fault_start, healed),
            (rss_before, rss_after),
        )
    })
}

/// Checks every sample against the policy's promise and measures the fault window.
pub fn judge(
    fault: Fault,
    policy: Policy,
    samples: &[Sample],
    (fault_start, healed): (Duration, Duration),
    rss_kib: (u64, u64),
) -> Report {
    let mut examples = Vec::new();
    let mut violations = 0;
    let mut errors = 0;
    for s in samples {
        let broken = match (policy, s.answer) {
            (_, Answer::Other(_) | Answer::Transport) => Some("no decision"),
            (Policy::Closed, Answer::Unavailable) => None,
            (_, Answer::Unavailable) => Some("503 although the policy answers without the store"),
            (Policy::Closed, Answer::Allowed { degraded: true, .. }) => {
                Some("admitted without the store under `closed`")
            }
            (_, Answer::Denied { degraded: true }) if policy != Policy::Local => {
                Some("a 429 without the store")
            }
            (Policy::Shadow, Answer::Denied { .. }) => Some("a 429 in shadow mode"),
            _ => None,
        };
        if !matches!(s.answer, Answer::Allowed { .. } | Answer::Denied { .. }) {
            errors += 1;
        }
        if let Some(why) = broken {
            violations += 1;
            if examples.len() < 3 {
                examples.push(format!("{why} at {:?}: {:?}", s.sent, s.answer));
            }
        }
    }

    // Admissions past the limit in some window. The store's own: the exact algorithm
    // must never; local fallback ones: per instance, the same limit. A restart loses
    // the counters, so a killed server's windows are judged either side of it.
    let admitted = |store: bool, range: (Duration, Duration)| -> Vec<Sample> {
        samples
            .iter()
            .filter(|s| s.sent >= range.0 && s.sent < range.1)
            .filter(|s| match s.answer {
                Answer::Allowed {
                    degraded,
                    shadow_denied,
                } => degraded != store && !(store && shadow_denied),
                _ => false,
            })
            .copied()
            .collect()
    };
    let all = (Duration::ZERO, Duration::MAX);
    let mut over = Vec::new();
    if fault.loses_state() {
        over.push(excess(&admitted(true, (Duration::ZERO, healed))));
        over.push(excess(&admitted(true, (healed, Duration::MAX))));
    } else {
        over.push(excess(&admitted(true, all)));
    }
    if policy == Policy::Local {
        over.push(excess(&admitted(false, all)));
    }
    for n in over.into_iter().filter(|&n| n > 0) {
        violations += n;
        examples.push(format!("{n} admitted past the limit in one window"));
    }

    let mut during: Vec<Duration> = samples
        .iter()
        .filter(|s| s.sent >= fault_start && s.sent <= healed)
        .map(|s| s.latency)
        .collect();
    during.sort();
    let p99 = during
        .get((during.len() * 99 / 100).min(during.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default();
    let recovery = samples
        .iter()
        .filter(|s| s.sent >= healed && s.answer.store_backed())
        .map(|s| s.done().saturating_sub(healed))
        .min();
    Report {
        fault,
        policy,
        transport: Transport::Plain,
        requests: samples.len(),
        violations,
        examples,
        p99,
        max: during.last().copied().unwrap_or_default(),
        recovery,
        errors,
        rss_kib,
    }
}

/// Admissions past [`LIMIT`] that certainly fell in one window.
fn excess(admitted: &[Sample]) -> usize {
    certain_most(admitted, WINDOW).saturating_sub(LIMIT as usize)
}

/// Settings for a service on `store` whose one policy file is `policy`'s, in a
/// scratch directory of its own (the caller removes `config` when done).
pub(crate) fn service_settings(
    name: &str,
    policy: Policy,
    store: String,
) -> anyhow::Result<Config> {
    let dir = std::env::temp_dir().join(format!(
        "spillway-reliability-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("reliability.yaml"), policy.yaml())?;
    let mut config = Config::ephemeral(dir);
    config.store.url = store;
    config.rules.watch = false;
    Ok(config)
}

/// A service for `config`, its store opened, listening.
pub(crate) async fn start(config: Config) -> anyhow::Result<Running> {
    Ok(App::builder(config).build().await?.start().await?)
}

impl fmt::Display for Report {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        write!(
            f,
            "| {}{} | {} | {} | {} | {} | {} | {} | {} | {:+} |",
            self.fault,
            match self.transport {
                Transport::Plain => "",
                Transport::Tls => " (TLS)",
            },
            self.policy.name(),
            self.requests,
            self.violations,
            ms(self.p99),
            ms(self.max),
            self.recovery.map_or("never".into(), ms),
            self.errors,
            self.rss_kib.1 as i64 - self.rss_kib.0 as i64,
        )
    }
}

/// The table's header, for [`Report`]'s rows.
pub const TABLE_HEADER: &str = "| fault | policy | requests | broke the rule | p99 ms | max ms | recovery ms | errors to callers | RSS KiB |\n|---|---|---|---|---|---|---|---|---|";
