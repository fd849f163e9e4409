//! A circuit breaker in front of the store: once failures are a large part of recent
//! calls the store is not called for a cool-down, so a dead store costs callers nothing
//! instead of a timeout each; then one probe goes through, and its success closes the
//! breaker again. The service and the tower layer put one in front of their store.
//!
//! By default it trips on a failure *ratio* ([`Trip::Ratio`]): at least 5 failures in the
//! last second, and at least half of its calls. A stall that times out a few dozen calls
//! among thousands leaves it closed (a count of failures in a row would open it, and
//! fail every call of the cool-down); a dead store opens it after its fifth failure when
//! the store was idle before, and within about half a second at a steady rate.

mod tally;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::{Error, Timestamp};
use parking_lot::Mutex;
use tally::Tally;

/// The least number of failures that opens the breaker.
pub const DEFAULT_FAILURES_TO_OPEN: u32 = 5;

/// The part of the window's calls that must fail to open the breaker.
pub const DEFAULT_FAILURE_RATIO: f64 = 0.5;

/// The sliding window whose calls the ratio is of.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(1);

/// How long an open breaker refuses calls before letting a probe through.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_millis(500);

/// When a closed breaker opens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trip {
    /// When, over the sliding `window`, at least `failures` calls failed and they are at
    /// least `ratio` of its calls (the previous window's calls weighted by how much of
    /// it the sliding window covers).
    Ratio {
        /// The least number of failures.
        failures: u32,
        /// The least failed part of the calls, in (0, 1].
        ratio: f64,
        /// The window.
        window: Duration,
    },
    /// After this many failures with no answer between them: for callers that call
    /// rarely (a few a second), where a ratio over a window would not see enough calls.
    InARow(u32),
}

impl Trip {
    /// [`Trip::Ratio`] with `failures` and the default ratio and window.
    pub fn ratio(failures: u32) -> Trip {
        Trip::Ratio {
            failures,
            ratio: DEFAULT_FAILURE_RATIO,
            window: DEFAULT_WINDOW,
        }
    }
}

impl Default for Trip {
    fn default() -> Trip {
        Trip::ratio(DEFAULT_FAILURES_TO_OPEN)
    }
}

/// Whether the store is being called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls fail fast until the cool-down ends.
    Open,
    /// One probe is in flight; other calls fail fast.
    HalfOpen,
}

/// Why a store behind a breaker gave no decision.
#[derive(Debug)]
pub enum StoreFailure {
    /// The breaker is open: the store was not called.
    BreakerOpen,
    /// The store failed, timed out, or refused the request.
    Failed(Error),
}

impl StoreFailure {
    /// A label for metrics and logs: `breaker_open`, `timeout` or `error`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreFailure::BreakerOpen => "breaker_open",
            StoreFailure::Failed(Error::Timeout(_)) => "timeout",
            StoreFailure::Failed(_) => "error",
        }
    }

    /// Whether the store was called and failed (a refused request and an open
    /// breaker say nothing new about the store's health).
    pub fn is_store_fault(&self) -> bool {
        matches!(self, StoreFailure::Failed(e) if !e.is_invalid_input())
    }
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreFailure::BreakerOpen => f.write_str("store unavailable (circuit breaker open)"),
            StoreFailure::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// Counts store calls and failures and decides whether the next call may go to the store.
///
/// Shared by every caller of one store (behind an `Arc` or inside a shared struct);
/// the lock is held for a few instructions, never across a store call, and a closed
/// breaker's callers do not take it.
#[derive(Debug)]
pub struct Breaker {
    inner: Mutex<Inner>,
    /// `true` exactly when `inner` is `Closed { failures: 0 }`, written only under the
    /// lock: a healthy store's callers read it and never touch the lock, which every
    /// decision on every core would otherwise contend for.
    healthy: AtomicBool,
    rule: Rule,
    cooldown: Duration,
    /// Times it opened from closed.
    opened: AtomicU64,
}

/// A [`Trip`] at work: a ratio's calls and failures counted over its window.
#[derive(Debug)]
enum Rule {
    Ratio {
        failures: u32,
        ratio: f64,
        tally: Tally,
    },
    InARow(u32),
}

#[derive(Debug)]
enum Inner {
    /// `failures` in a row, for [`Trip::InARow`] (always 0 for a ratio).
    Closed {
        failures: u32,
    },
    Open {
        until: Timestamp,
    },
    /// `since` bounds a probe whose caller went away: after a cool-down another may go.
    HalfOpen {
        since: Timestamp,
    },
}

impl Breaker {
    /// A closed breaker that opens on the default ratio ([`Trip::ratio`]) with at least
    /// `failures` failures, and stays open for `cooldown`.
    pub fn new(failures: u32, cooldown: Duration) -> Breaker {
        Breaker::tripping(Trip::ratio(failures), cooldown)
    }

    /// A closed breaker that opens as `trip` says and stays open for `cooldown`. The
    /// least number of failures is at least 1, and a ratio is taken within (0, 1].
    pub fn tripping(trip: Trip, cooldown: Duration) -> Breaker {
        let rule = match trip {
            Trip::Ratio {
                failures,
                ratio,
                window,
            } => Rule::Ratio {
                failures: failures.max(1),
                ratio: if ratio > 0.0 {
                    ratio.min(1.0)
                } else {
                    DEFAULT_FAILURE_RATIO
                },
                tally: Tally::new(window),
            },
            Trip::InARow(n) => Rule::InARow(n.max(1)),
        };
        Breaker {
            inner: Mutex::new(Inner::Closed { failures: 0 }),
            healthy: AtomicBool::new(true),
            rule,
            cooldown,
            opened: AtomicU64::new(0),
        }
    }

    /// When it opens.
    pub fn trip(&self) -> Trip {
        match &self.rule {
            Rule::Ratio {
                failures,
                ratio,
                tally,
            } => Trip::Ratio {
                failures: *failures,
                ratio: *ratio,
                window: tally.window(),
            },
            Rule::InARow(n) => Trip::InARow(*n),
        }
    }

    /// Whether a call may go to the store now.
    pub fn admit(&self, now: Timestamp) -> bool {
        if self.healthy.load(Ordering::Relaxed) {
            return true;
        }
        let mut inner = self.inner.lock();
        match *inner {
            Inner::Closed { .. } => true,
            Inner::Open { until } | Inner::HalfOpen { since: until } if now < until => false,
            Inner::Open { .. } | Inner::HalfOpen { .. } => {
                *inner = Inner::HalfOpen {
                    since: now.saturating_add(self.cooldown),
                };
                true
            }
        }
    }

    /// Records how a store call ended at `now`: an answer closes the breaker, a failure
    /// or timeout counts towards opening it, a refused request (invalid input) counts
    /// for nothing.
    pub fn record<T>(&self, result: Result<T, Error>, now: Timestamp) -> Result<T, StoreFailure> {
        match result {
            Ok(answer) => {
                self.success(now);
                Ok(answer)
            }
            Err(e) if e.is_invalid_input() => Err(StoreFailure::Failed(e)),
            Err(e) => {
                self.failure(now);
                Err(StoreFailure::Failed(e))
            }
        }
    }

    /// The store answered at `now`.
    pub fn success(&self, now: Timestamp) {
        if let Rule::Ratio { tally, .. } = &self.rule {
            tally.add(now, false);
        }
        if self.healthy.load(Ordering::Relaxed) {
            return;
        }
        let mut inner = self.inner.lock();
        if !matches!(*inner, Inner::Closed { .. }) {
            // Back from open: what opened it is no reason to open again.
            if let Rule::Ratio { tally, .. } = &self.rule {
                tally.clear();
            }
        }
        *inner = Inner::Closed { failures: 0 };
        self.healthy.store(true, Ordering::Relaxed);
    }

    /// The store failed or timed out at `now`.
    pub fn failure(&self, now: Timestamp) {
        if let Rule::Ratio {
            failures,
            ratio,
            tally,
        } = &self.rule
        {
            let counts = tally.add(now, true);
            let tripped =
                counts.failures >= f64::from(*failures) && counts.failures >= ratio * counts.calls;
            // Closed and not tripped: nothing to change. Open or half-open (a failed
            // probe, or a call sent before it opened): open again, below.
            if !tripped && self.healthy.load(Ordering::Relaxed) {
                return;
            }
        }
        let mut inner = self.inner.lock();
        self.healthy.store(false, Ordering::Relaxed);
        let run = match *inner {
            Inner::Closed { failures } => Some(failures + 1),
            _ => None,
        };
        let open = match (run, &self.rule) {
            (Some(failures), Rule::InARow(n)) if failures < *n => {
                *inner = Inner::Closed { failures };
                false
            }
            _ => true,
        };
        if open {
            if run.is_some() {
                self.opened.fetch_add(1, Ordering::Relaxed);
            }
            *inner = Inner::Open {
                until: now.saturating_add(self.cooldown),
            };
        }
    }

    /// How many times it has opened from closed (a failed probe opening it again is
    /// not counted): each is a cool-down of calls answered by their failure policy.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Closed, open or half-open, for metrics and readiness.
    pub fn state(&self) -> BreakerState {
        match *self.inner.lock() {
            Inner::Closed { .. } => BreakerState::Closed,
            Inner::Open { .. } => BreakerState::Open,
            Inner::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: Timestamp, ms: u64) -> Timestamp {
        t.saturating_add(Duration::from_millis(ms))
    }

    #[test]
    fn in_a_row_opens_after_a_run_of_failures_and_closes_after_a_good_probe() {
        let b = Breaker::tripping(Trip::InARow(3), Duration::from_millis(500));
        let t0 = Timestamp::from_secs(100);
        b.failure(t0);
        b.failure(t0);
        assert!(b.admit(t0), "two failures: still closed");
        b.success(t0);
        b.failure(t0);
        b.failure(t0);
        assert_eq!(b.state(), BreakerState::Closed, "a success resets the run");
        b.failure(t0);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.admit(ms(t0, 499)));

        let t1 = ms(t0, 500);
        assert!(b.admit(t1), "the cool-down is over: one probe");
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(!b.admit(t1), "only one probe at a time");
        b.failure(t1);
        assert_eq!(
            b.state(),
            BreakerState::Open,
            "a failed probe opens it again"
        );
        assert_eq!(b.opened(), 1, "a failed probe is not another opening");

        let t2 = ms(t1, 500);
        assert!(b.admit(t2));
        b.success(t2);
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.admit(t2));
    }

    #[test]
    fn a_ratio_ignores_a_slow_reply_in_a_hundred_and_a_burst_of_them_among_thousands() {
        let b = Breaker::new(5, Duration::from_millis(500));
        let t0 = Timestamp::from_secs(100);
        // Ten seconds at 1,000 calls a second, one in a hundred failing.
        for i in 0..10_000u64 {
            let now = Timestamp::from_micros(t0.as_micros() + i * 1000);
            if i % 100 == 99 {
                b.failure(now);
            } else {
                b.success(now);
            }
            assert_eq!(b.state(), BreakerState::Closed, "call {i}");
        }
        // A stall: 40 calls in a row time out, among the second's thousand.
        let t1 = ms(t0, 10_000);
        for i in 0..40 {
            b.failure(ms(t1, i / 10));
        }
        assert_eq!(b.state(), BreakerState::Closed, "40 of about 1,040");
        assert!(b.admit(ms(t1, 5)));
    }

    #[test]
    fn a_ratio_opens_on_a_dead_store_at_its_fifth_failure_after_quiet_and_within_the_window_under_load()
     {
        // Idle before: the fifth failure opens it.
        let b = Breaker::new(5, Duration::from_millis(500));
        let t0 = Timestamp::from_secs(100);
        for i in 0..4 {
            b.failure(ms(t0, i));
            assert_eq!(b.state(), BreakerState::Closed);
        }
        b.failure(ms(t0, 4));
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.opened(), 1);

        // At 1,000 calls a second for a second, then every call fails: open once the
        // failures are half the sliding second's calls, before it has passed.
        let b = Breaker::new(5, Duration::from_millis(500));
        for i in 0..1000 {
            b.success(ms(t0, i));
        }
        let dead = ms(t0, 1000);
        let opened = (0..1000)
            .find(|&i| {
                b.failure(ms(dead, i));
                b.state() == BreakerState::Open
            })
            .expect("opens within the window");
        assert!((300..=700).contains(&opened), "opened after {opened} ms");
        // Its probe's success closes it, and the failures before are forgotten.
        let after = ms(dead, opened + 500);
        assert!(b.admit(after));
        b.success(after);
        b.failure(after);
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "one failure after the probe"
        );
    }

    #[test]
    fn a_ratio_and_a_least_count_are_both_needed() {
        let trip = Trip::Ratio {
            failures: 3,
            ratio: 0.25,
            window: Duration::from_secs(10),
        };
        let b = Breaker::tripping(trip, Duration::from_millis(500));
        let t = Timestamp::from_secs(100);
        for _ in 0..9 {
            b.success(t);
        }
        b.failure(t);
        b.failure(t);
        assert_eq!(b.state(), BreakerState::Closed, "2 of 11: too few failures");
        b.failure(t);
        assert_eq!(b.state(), BreakerState::Open, "3 of 12: a quarter");
        assert_eq!(b.trip(), trip);
        // A ratio outside (0, 1] is the default, or 1.
        let odd = |ratio| {
            Breaker::tripping(
                Trip::Ratio {
                    failures: 0,
                    ratio,
                    window: DEFAULT_WINDOW,
                },
                DEFAULT_COOLDOWN,
            )
            .trip()
        };
        assert_eq!(odd(f64::NAN), Trip::ratio(1));
        assert_eq!(odd(-1.0), Trip::ratio(1));
        assert!(matches!(odd(7.0), Trip::Ratio { ratio, .. } if ratio == 1.0));
    }

    #[test]
    fn record_counts_store_faults_but_not_refused_requests() {
        let b = Breaker::tripping(Trip::InARow(1), Duration::from_millis(100));
        let t = Timestamp::from_secs(1);
        let refused = b.record::<()>(Err(Error::InvalidRequest("bad".into())), t);
        assert!(!refused.unwrap_err().is_store_fault());
        assert_eq!(
            b.state(),
            BreakerState::Closed,
            "a refusal says nothing of the store"
        );
        let timeout = b.record::<()>(Err(Error::Timeout(Duration::from_millis(5))), t);
        assert_eq!(timeout.unwrap_err().kind(), "timeout");
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.admit(ms(t, 100)));
        assert_eq!(b.record(Ok(7), t).unwrap(), 7);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_probe_whose_caller_vanished_does_not_hold_the_breaker_forever() {
        let b = Breaker::new(1, Duration::from_millis(100));
        let t0 = Timestamp::from_secs(1);
        b.failure(t0);
        let t1 = ms(t0, 100);
        assert!(b.admit(t1)); // the probe's caller never reports back
        assert!(!b.admit(ms(t1, 99)));
        assert!(b.admit(ms(t1, 100)));
    }
}
