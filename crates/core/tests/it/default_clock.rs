//! The default clock ([`CoarseClock`], what `Limiter::new`, the tower layer and `spillway
//! serve` read) moves in steps of about a millisecond, so thousands of checks read the
//! same instant. Every algorithm's promise must hold against the time it reads: here
//! each exact algorithm is hammered on the real default clock for a few hundred
//! milliseconds, every admission is recorded with the time the store was given, and no
//! window of that time (sliding over every admission) holds more than the limit
//! promises. Nothing here sleeps: the test spins until the clock has moved far enough.

use std::collections::VecDeque;
use std::time::Duration;

use spillway_core::{
    Algorithm, Clock, CoarseClock, Edge, Key, Limit, MemoryStore, Request, Timestamp,
};

/// Spins checks until the clock has moved `span`; returns every admission's time (µs).
fn admissions(store: &MemoryStore, clock: &CoarseClock, limit: &Limit, span: u64) -> Vec<u64> {
    let key = Key::new("k").unwrap();
    let start = clock.now().as_micros();
    let mut admitted = Vec::new();
    let mut checks = 0u64;
    loop {
        let now = clock.now();
        if now.as_micros() >= start + span {
            break;
        }
        checks += 1;
        let d = store.decide_one(Request::new(&key, limit, 1), now).unwrap();
        if d.allowed() {
            admitted.push(now.as_micros());
        }
    }
    assert!(
        checks > 4 * admitted.len() as u64,
        "the test means something only when most checks are denied: {checks} checks, {} admitted",
        admitted.len()
    );
    admitted
}

/// The most admissions in any window of `window` µs (half-open, `[t, t + window)`).
fn most_in_any_window(times: &[u64], window: u64) -> u64 {
    let mut open: VecDeque<u64> = VecDeque::new();
    let mut most = 0;
    for &t in times {
        open.push_back(t);
        while open.front().is_some_and(|&f| f + window <= t) {
            open.pop_front();
        }
        most = most.max(open.len() as u64);
    }
    most
}

#[test]
fn the_default_clock_never_lets_a_limit_admit_more_than_it_promises() {
    let clock = CoarseClock::new();
    let window = Duration::from_millis(20);
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow {
            precision: 4,
            edge: Edge::Strict,
        },
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ] {
        let limit = Limit::new(algorithm, 50, window).unwrap();
        let promise = limit.most_in_any_window().expect("an exact algorithm");
        let store = MemoryStore::new();
        let times = admissions(&store, &clock, &limit, 300_000);
        let window_us = limit.window_micros();
        let most = most_in_any_window(&times, window_us);
        assert!(
            most <= promise,
            "{algorithm}: {most} admitted in one window of the clock's time, promised {promise}"
        );
        // The clock moved in steps: many admissions share an instant.
        let distinct = {
            let mut t = times.clone();
            t.dedup();
            t.len()
        };
        assert!(
            distinct < times.len(),
            "{algorithm}: no two admissions read the same instant"
        );
        assert!(
            !times.is_empty() && Timestamp::from_micros(times[0]) <= clock.now(),
            "{algorithm}"
        );
    }
}
