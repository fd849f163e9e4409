//! The replay behind `spillway simulate`: arrivals through the memory store on a manual
//! clock, and the measurements.

use serde::Serialize;
use spillway_core::{Algorithm, Clock, Key, Limit, ManualClock, MemoryStore, Request, Timestamp};

/// Where simulated time starts: a day boundary, so every window is aligned to it.
pub const START: Timestamp = Timestamp::from_secs(19_700 * 86_400);

/// One algorithm's run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// `fixed_window`, `sliding_log`, `sliding_window`, `token_bucket`, `gcra`.
    pub algorithm: &'static str,
    /// The algorithm with its parameters, as shown in the table and the chart.
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge: Option<&'static str>,
    pub admitted: u64,
    pub rejected: u64,
    /// The most requests admitted in any window `[t, t + W)`, found by scanning every
    /// admitted timestamp.
    pub max_in_window: u64,
    pub limit: u64,
    /// The most the algorithm promises to admit in any window of W (`None`: approximate).
    pub bound: Option<u64>,
    /// `max_in_window / limit`.
    pub max_ratio: f64,
    /// Requests admitted here that the exact sliding log rejected.
    pub over_admitted_vs_log: u64,
    /// Requests rejected here that the exact sliding log admitted.
    pub under_admitted_vs_log: u64,
    /// Peak bytes the key occupied in the memory store (entry, key and state).
    pub bytes_per_key: usize,
    /// With `--usage`: what the admitted requests used, charged after the fact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip)]
    pub admitted_at: Vec<u64>,
    #[serde(skip)]
    decisions: Vec<bool>,
}

/// What metered requests used (`--usage`): each request only looks (cost 0) and, when
/// admitted, is charged its usage after the fact, into debt past the limit.
#[derive(Debug, Serialize)]
pub struct Usage {
    /// Units charged in all.
    pub used: u64,
    /// The most units used in any window `[t, t + W)`.
    pub max_used_in_window: u64,
    /// `max_used_in_window / limit`: what one window overspent, the debt later windows
    /// pay back.
    pub max_ratio: f64,
    /// Units used per window over the run, ÷ limit: debt paid back, it stays near 1
    /// (above by at most what the first window and the last debt hold).
    pub long_run_ratio: f64,
}

/// Replays `arrivals` (µs after [`START`], sorted) through `limit` on a fresh memory
/// store, one key, cost 1 each, or (`usages`, one per arrival) a look then the
/// arrival's usage when admitted; `tick` is called after every request.
pub fn replay(
    limit: &Limit,
    arrivals: &[u64],
    usages: Option<&[u64]>,
    mut tick: impl FnMut(),
) -> Report {
    let store = MemoryStore::new();
    let clock = ManualClock::new(START);
    let key = Key::new("client").expect("valid key");
    let mut decisions = Vec::with_capacity(arrivals.len());
    let mut admitted_at = Vec::new();
    let mut bytes_per_key = 0;
    let mut used_at = Vec::new();
    for (i, &at) in arrivals.iter().enumerate() {
        clock.set(Timestamp::from_micros(START.as_micros() + at));
        let cost = u64::from(usages.is_none());
        let decision = store
            .decide_one(Request::new(&key, limit, cost), clock.now())
            .expect("cost 1 or 0 is always a valid request");
        if decision.allowed() {
            admitted_at.push(at);
            if let Some(usages) = usages {
                store
                    .decide_one(Request::usage(&key, limit, usages[i]), clock.now())
                    .expect("--usage is bounded when parsed");
                used_at.push((at, usages[i]));
            }
            bytes_per_key = bytes_per_key.max(store.footprint(&key).unwrap_or(0));
        }
        decisions.push(decision.allowed());
        tick();
    }
    let max_in_window = max_in_window(&admitted_at, limit.window_micros());
    let usage = usages.map(|_| {
        let used: u64 = used_at.iter().map(|(_, u)| u).sum();
        let most = max_used_in_window(&used_at, limit.window_micros());
        let windows =
            (arrivals.last().copied().unwrap_or(0) + 1) as f64 / limit.window_micros() as f64;
        Usage {
            used,
            max_used_in_window: most,
            max_ratio: most as f64 / limit.limit() as f64,
            long_run_ratio: used as f64 / (windows.max(1.0) * limit.limit() as f64),
        }
    });
    let algorithm = limit.algorithm();
    let (precision, edge) = match algorithm {
        Algorithm::SlidingWindow { precision, edge } => (Some(precision), Some(edge.name())),
        _ => (None, None),
    };
    Report {
        algorithm: algorithm.name(),
        label: label(algorithm),
        precision,
        edge,
        admitted: admitted_at.len() as u64,
        rejected: (arrivals.len() - admitted_at.len()) as u64,
        max_in_window,
        limit: limit.limit(),
        bound: limit.most_in_any_window(),
        max_ratio: max_in_window as f64 / limit.limit() as f64,
        over_admitted_vs_log: 0,
        under_admitted_vs_log: 0,
        bytes_per_key,
        usage,
        admitted_at,
        decisions,
    }
}

impl Report {
    /// Counts the requests decided differently from `log` (the exact sliding log's run).
    pub fn compare_with(&mut self, log: &Report) {
        for (&mine, &exact) in self.decisions.iter().zip(&log.decisions) {
            self.over_admitted_vs_log += u64::from(mine && !exact);
            self.under_admitted_vs_log += u64::from(!mine && exact);
        }
    }
}

fn label(algorithm: Algorithm) -> String {
    match algorithm {
        Algorithm::SlidingWindow { precision, edge } => {
            format!("sliding_window p={precision} {edge}")
        }
        other => other.name().to_string(),
    }
}

/// The most timestamps in any half-open window `[t, t + w)` of sorted `times`.
pub fn max_in_window(times: &[u64], w: u64) -> u64 {
    let mut best = 0;
    let mut lo = 0;
    for (hi, &t) in times.iter().enumerate() {
        while times[lo] + w <= t {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u64
}

/// The most units of `used` (sorted by time) in any half-open window `[t, t + w)`.
pub fn max_used_in_window(used: &[(u64, u64)], w: u64) -> u64 {
    let (mut best, mut sum, mut lo) = (0, 0, 0);
    for &(t, units) in used {
        sum += units;
        while used[lo].0 + w <= t {
            sum -= used[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

/// Admitted requests in the trailing window `(t − w, t]`, for the chart.
pub fn trailing_count(times: &[u64], t: u64, w: u64) -> u64 {
    let hi = times.partition_point(|&x| x <= t);
    let lo = times.partition_point(|&x| x + w <= t);
    (hi - lo) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_in_window_scans_half_open_windows() {
        assert_eq!(max_in_window(&[], 10), 0);
        assert_eq!(max_in_window(&[0, 9, 10, 19, 20], 10), 2);
        assert_eq!(max_in_window(&[5, 5, 5, 14], 10), 4);
        assert_eq!(trailing_count(&[0, 9, 10, 19, 20], 19, 10), 2);
        assert_eq!(max_used_in_window(&[], 10), 0);
        assert_eq!(
            max_used_in_window(&[(0, 5), (9, 7), (10, 1), (19, 4)], 10),
            12
        );
        assert_eq!(
            max_used_in_window(&[(0, 5), (9, 1), (10, 9), (12, 3)], 10),
            13
        );
    }
}
