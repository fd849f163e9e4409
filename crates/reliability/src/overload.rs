//! Open-loop overload straight on a Redis store: several times a limit's rate, from
//! concurrent tasks, for several windows; every admitted request checked against what
//! its algorithm promises in any window ([`Limit::most_in_any_window`]), and the
//! approximate algorithm's worst window measured.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use spillway_core::{Algorithm, Clock, Edge, Key, Limit, Request, Store, SystemClock};
use spillway_redis::RedisStore;
use tokio::time::Instant;

use crate::load::{self, Answer, certain_most, most_sent};

/// The load.
#[derive(Clone, Copy, Debug)]
pub struct Overload {
    /// Requests admitted per window.
    pub limit: u64,
    pub window: Duration,
    /// Load as a multiple of the limit's rate.
    pub multiplier: u32,
    /// How long the load lasts.
    pub length: Duration,
}

impl Overload {
    fn rate(&self) -> u32 {
        (self.limit as f64 * f64::from(self.multiplier) / self.window.as_secs_f64()).ceil() as u32
    }
}

/// What one algorithm did under the load.
#[derive(Clone, Debug)]
pub struct OverloadReport {
    pub algorithm: String,
    pub sent: usize,
    pub admitted: usize,
    pub errors: usize,
    /// What the algorithm promises in any window (`None`: approximate).
    pub promise: Option<u64>,
    /// The most admitted that certainly fell in one window.
    pub certain_most: usize,
    /// The most admitted among requests sent within one window.
    pub most_sent: usize,
    pub limit: u64,
}

impl OverloadReport {
    /// Admissions past the promise that certainly happened (the exact algorithms: 0).
    pub fn violations(&self) -> usize {
        self.promise
            .map_or(0, |p| self.certain_most.saturating_sub(p as usize))
    }
}

/// The algorithms the overload runs, with a label each.
pub fn algorithms() -> Vec<(String, Algorithm)> {
    let sliding = |edge| Algorithm::SlidingWindow {
        precision: 10,
        edge,
    };
    [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        sliding(Edge::Strict),
        sliding(Edge::Interpolate),
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ]
    .into_iter()
    .map(|a| {
        let label = match a {
            Algorithm::SlidingWindow { precision, edge } => {
                format!("sliding_window p={precision} {edge}")
            }
            other => other.name().to_string(),
        };
        (label, a)
    })
    .collect()
}

/// Runs the overload against `store` for one algorithm, on a key of its own.
pub async fn run(
    store: RedisStore,
    label: String,
    algorithm: Algorithm,
    key: String,
    o: Overload,
) -> anyhow::Result<OverloadReport> {
    let limit = Limit::new(algorithm, o.limit, o.window)?;
    let promise = limit.most_in_any_window();
    let key = Key::new(key)?;
    let shared = Arc::new((store, key, limit));
    let call = move || {
        let shared = Arc::clone(&shared);
        async move {
            let (store, key, limit) = &*shared;
            // Server-time mode (the default): `now` is Redis's, this one is unused.
            match store
                .check_one(Request::new(key, limit, 1), SystemClock.now())
                .await
            {
                Ok(d) if d.allowed() => Answer::Allowed {
                    degraded: false,
                    shadow_denied: false,
                },
                Ok(_) => Answer::Denied { degraded: false },
                Err(_) => Answer::Transport,
            }
        }
    };
    let samples = load::drive(o.rate(), o.length, Instant::now(), call).await;
    let admitted = load::admitted(&samples);
    Ok(OverloadReport {
        algorithm: label,
        sent: samples.len(),
        admitted: admitted.len(),
        errors: samples
            .iter()
            .filter(|s| s.answer == Answer::Transport)
            .count(),
        promise,
        certain_most: certain_most(&admitted, o.window),
        most_sent: most_sent(&admitted, o.window),
        limit: o.limit,
    })
}

/// Every algorithm at once, each on a key of its own (tagged by its label, so a
/// Cluster spreads them over slots).
pub async fn run_all(store: &RedisStore, o: Overload) -> anyhow::Result<Vec<OverloadReport>> {
    let runs: Vec<_> = algorithms()
        .into_iter()
        .map(|(label, algorithm)| {
            let key = label.to_owned();
            tokio::spawn(run(store.clone(), label, algorithm, key, o))
        })
        .collect();
    let mut reports = Vec::with_capacity(runs.len());
    for r in runs {
        reports.push(r.await??);
    }
    Ok(reports)
}

impl fmt::Display for OverloadReport {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "| {} | {} | {} | {} | {} | {} | {:.3} | {} |",
            self.algorithm,
            self.sent,
            self.admitted,
            self.promise.map_or("≈ limit".into(), |p| p.to_string()),
            self.most_sent,
            self.certain_most,
            self.most_sent as f64 / self.limit as f64,
            self.violations(),
        )
    }
}

/// The table's header, for [`OverloadReport`]'s rows.
pub const OVERLOAD_HEADER: &str = "| algorithm | sent | admitted | promise in any window | most admitted in a window (by sending time) | most certainly in one window | most / limit | past the promise |\n|---|---|---|---|---|---|---|---|";
