//! What every algorithm module implements, on its own precomputed parameters (built
//! once with the `Limit`), and the decisions they build.

use std::time::Duration;

use crate::decision::{Decision, Outcome};

/// One algorithm, its parameters fixed: the pure functions a store calls.
pub(super) trait Meter {
    /// What it stores per key; `Default` is "nothing charged yet".
    type State: Default;

    /// Would `cost` be admitted at `now` (µs)? `member` is what the request brings:
    /// only `distinct` (what it counts) and `concurrency` (the hold's id) read it.
    fn check(&self, s: &Self::State, now: u64, cost: u64, member: &[u8]) -> Decision;

    /// Charges `cost` at `now`: admitted, or (for `count_rejected`) denied.
    fn commit(&self, s: &mut Self::State, now: u64, cost: u64, admitted: bool, member: &[u8]);

    /// Whether a denied take bringing `member` is charged anyway, as a mark (see the
    /// `concurrency` algorithm: a denied take of an id already held, whose release
    /// must give back the mark and not the hold). No for every other algorithm.
    fn marks_denied(&self, s: &Self::State, now: u64, member: &[u8]) -> bool {
        let _ = (s, now, member);
        false
    }

    /// Gives back at `now` `cost` units charged at `at` (what a reservation took and
    /// did not use), as far as the state still holds them; `member` names what is
    /// given back where the algorithm keeps it apart (a `concurrency` hold). Only the
    /// algorithms that [refund](crate::Algorithm::refunds) implement it.
    fn refund(&self, s: &mut Self::State, now: u64, cost: u64, at: u64, member: &[u8]) {
        let _ = (s, now, cost, at, member);
    }

    /// When `s` becomes the same as no state, if nothing more is charged (µs).
    fn idle_at(&self, s: &Self::State) -> u64;
}

#[inline]
fn micros(us: u64) -> Duration {
    Duration::from_micros(us)
}

/// An admitted decision.
#[inline]
pub(super) fn allow(capacity: u64, remaining: u64, reset_after: u64) -> Decision {
    Decision {
        outcome: Outcome::Allowed,
        limit: capacity,
        remaining: remaining.min(capacity),
        reset_after: micros(reset_after),
        wait: Duration::ZERO,
        borrowed: false,
        queued: false,
    }
}

/// A decision admitted after `wait` µs (its slot reserved then): nothing remains now.
#[inline]
pub(super) fn waited(capacity: u64, wait: u64, reset_after: u64) -> Decision {
    Decision {
        outcome: Outcome::Allowed,
        limit: capacity,
        remaining: 0,
        reset_after: micros(reset_after),
        wait: micros(wait),
        borrowed: false,
        queued: false,
    }
}

/// A denied decision: for good when `cost` exceeds the capacity, else until `retry_after`.
#[inline]
pub(super) fn deny(
    capacity: u64,
    cost: u64,
    retry_after: u64,
    remaining: u64,
    reset_after: u64,
) -> Decision {
    let outcome = if cost > capacity {
        Outcome::CostExceedsCapacity
    } else {
        Outcome::Denied {
            retry_after: micros(retry_after),
        }
    };
    Decision {
        outcome,
        limit: capacity,
        remaining: remaining.min(capacity),
        reset_after: micros(reset_after),
        wait: Duration::ZERO,
        borrowed: false,
        queued: false,
    }
}
