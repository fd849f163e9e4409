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
    #[serde(skip)]
    pub admitted_at: Vec<u64>,
    #[serde(skip)]
    decisions: Vec<bool>,
}

/// Replays `arrivals` (µs after [`START`], sorted) through `limit` on a fresh memory
/// store, one key, cost 1 each; `tick` is called after every request.
pub fn replay(limit: &Limit, arrivals: &[u64], mut tick: impl FnMut()) -> Report {
    let store = MemoryStore::new();
    let clock = ManualClock::new(START);
    let key = Key::new("client").expect("valid key");
    let mut decisions = Vec::with_capacity(arrivals.len());
    let mut admitted_at = Vec::new();
    let mut bytes_per_key = 0;
    for &at in arrivals {
        clock.set(Timestamp::from_micros(START.as_micros() + at));
        let decision = store
            .decide_one(Request::new(&key, limit, 1), clock.now())
            .expect("cost 1 is always a valid request");
        if decision.allowed() {
            admitted_at.push(at);
            bytes_per_key = bytes_per_key.max(store.footprint(&key).unwrap_or(0));
        }
        decisions.push(decision.allowed());
        tick();
    }
    let max_in_window = max_in_window(&admitted_at, limit.window_micros());
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
    }
}
