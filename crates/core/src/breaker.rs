//! A circuit breaker in front of the store: after a run of failures the store is not
//! called for a cool-down, so a dead store costs callers nothing instead of a timeout
//! each; then one probe goes through, and its success closes the breaker again.
//! The service and the tower layer put one in front of their store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::{Error, Timestamp};
use parking_lot::Mutex;

/// Failures in a row that open the breaker.
pub const DEFAULT_FAILURES_TO_OPEN: u32 = 5;

/// How long an open breaker refuses calls before letting a probe through.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_millis(500);

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

/// Counts store failures and decides whether the next call may go to the store.
///
/// Shared by every caller of one store (behind an `Arc` or inside a shared struct);
/// the lock is held for a few instructions, never across a store call.
#[derive(Debug)]
pub struct Breaker {
    inner: Mutex<Inner>,
    /// `true` exactly when `inner` is `Closed { failures: 0 }`, written only under the
    /// lock: a healthy store's callers read it and never touch the lock, which every
    /// decision on every core would otherwise contend for.
    healthy: AtomicBool,
    failures_to_open: u32,
    cooldown: Duration,
}

#[derive(Debug)]
enum Inner {
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
    /// A closed breaker that opens after `failures_to_open` failures in a row and
    /// stays open for `cooldown`.
    pub fn new(failures_to_open: u32, cooldown: Duration) -> Breaker {
        Breaker {
            inner: Mutex::new(Inner::Closed { failures: 0 }),
            healthy: AtomicBool::new(true),
            failures_to_open: failures_to_open.max(1),
            cooldown,
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

    /// Records how a store call ended: an answer closes the breaker, a failure or
    /// timeout counts towards opening it, a refused request (invalid input) counts for
    /// nothing.
    pub fn record<T>(&self, result: Result<T, Error>, now: Timestamp) -> Result<T, StoreFailure> {
        match result {
            Ok(answer) => {
                self.success();
                Ok(answer)
            }
            Err(e) if e.is_invalid_input() => Err(StoreFailure::Failed(e)),
            Err(e) => {
                self.failure(now);
                Err(StoreFailure::Failed(e))
            }
        }
    }

    /// The store answered.
    pub fn success(&self) {
        if self.healthy.load(Ordering::Relaxed) {
            return;
        }
        let mut inner = self.inner.lock();
        *inner = Inner::Closed { failures: 0 };
        self.healthy.store(true, Ordering::Relaxed);
    }

    /// The store failed or timed out.
    pub fn failure(&self, now: Timestamp) {
        let mut inner = self.inner.lock();
        self.healthy.store(false, Ordering::Relaxed);
        let open = match *inner {
            Inner::Closed { failures } if failures + 1 < self.failures_to_open => {
                *inner = Inner::Closed {
                    failures: failures + 1,
                };
                false
            }
            _ => true,
        };
        if open {
            *inner = Inner::Open {
                until: now.saturating_add(self.cooldown),
            };
        }
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

    #[test]
    fn opens_after_a_run_of_failures_and_closes_after_a_good_probe() {
        let b = Breaker::new(3, Duration::from_millis(500));
        let t0 = Timestamp::from_secs(100);
        b.failure(t0);
        b.failure(t0);
        assert!(b.admit(t0), "two failures: still closed");
        b.success();
        b.failure(t0);
        b.failure(t0);
        assert_eq!(b.state(), BreakerState::Closed, "a success resets the run");
        b.failure(t0);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(!b.admit(t0.saturating_add(Duration::from_millis(499))));

        let t1 = t0.saturating_add(Duration::from_millis(500));
        assert!(b.admit(t1), "the cool-down is over: one probe");
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(!b.admit(t1), "only one probe at a time");
        b.failure(t1);
        assert_eq!(
            b.state(),
            BreakerState::Open,
            "a failed probe opens it again"
        );

        let t2 = t1.saturating_add(Duration::from_millis(500));
        assert!(b.admit(t2));
        b.success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.admit(t2));
    }

    #[test]
    fn record_counts_store_faults_but_not_refused_requests() {
        let b = Breaker::new(1, Duration::from_millis(100));
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
        assert!(b.admit(t.saturating_add(Duration::from_millis(100))));
        assert_eq!(b.record(Ok(7), t).unwrap(), 7);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_probe_whose_caller_vanished_does_not_hold_the_breaker_forever() {
        let b = Breaker::new(1, Duration::from_millis(100));
        let t0 = Timestamp::from_secs(1);
        b.failure(t0);
        let t1 = t0.saturating_add(Duration::from_millis(100));
        assert!(b.admit(t1)); // the probe's caller never reports back
        assert!(!b.admit(t1.saturating_add(Duration::from_millis(99))));
        assert!(b.admit(t1.saturating_add(Duration::from_millis(100))));
    }
}
