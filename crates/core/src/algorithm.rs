//! The five algorithms, pure: each takes the stored state, `now` and a cost, and
//! returns a [`Decision`] (`check`) or the new state (`commit`). Nothing here locks,
//! allocates on the admit path of the fixed-size states, or reads a clock.
//!
//! `check` and `commit` are separate so that a store can check every limit of a
//! batch before it charges any of them (all or nothing). The Redis scripts implement
//! the same functions; these are their specification.
//!
//! Shared rules, every algorithm:
//! - A cost fits when `used + cost <= capacity`, so cost 0 (a peek) fits unless the
//!   state is already over capacity (possible only with `count_rejected`).
//! - A cost larger than the capacity never fits: [`Outcome::CostExceedsCapacity`].
//! - A clock that steps back is treated as standing still at the newest time the
//!   state has seen: a key's time never runs backwards.
//! - `charge_rejected` (for `count_rejected` limits) charges a denied request as far
//!   as the state can hold it: counters keep counting; a token bucket or GCRA is
//!   emptied but not driven into debt; a sliding log folds the charge into its newest
//!   entry, moved to `now`. Either way a client that keeps trying stays limited until
//!   it stops, and the state stays bounded.

pub mod fixed_window;
pub mod gcra;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

use std::time::Duration;

use crate::decision::{Decision, Outcome};
use crate::limit::{Algorithm, Limit};
use crate::time::Timestamp;

/// The stored state of one limit for one key. `State::default()` is "no state":
/// nothing charged yet. Opaque: only the limit it belongs to can read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State(Inner);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Inner {
    #[default]
    Empty,
    FixedWindow(fixed_window::Window),
    SlidingLog(sliding_log::Log),
    SlidingWindow(sliding_window::Buckets),
    TokenBucket(token_bucket::Bucket),
    Gcra(gcra::Tat),
}

impl State {
    /// No state: nothing charged.
    pub fn new() -> Self {
        State::default()
    }

    pub(crate) const fn empty() -> Self {
        State(Inner::Empty)
    }

    /// Bytes this state occupies: its inline size plus what it holds on the heap.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<State>()
            + match &self.0 {
                Inner::SlidingLog(log) => log.heap_bytes(),
                Inner::SlidingWindow(buckets) => buckets.heap_bytes(),
                _ => 0,
            }
    }
}

/// Dispatches to the algorithm's module with the matching state, or its empty state
/// when the stored one belongs to another algorithm (or there is none).
macro_rules! with_state {
    ($limit:expr, $state:expr, |$module:ident, $s:ident| $body:expr) => {
        match ($limit.algorithm(), $state) {
            (Algorithm::FixedWindow, Inner::FixedWindow($s)) => {
                use fixed_window as $module;
                $body
            }
            (Algorithm::FixedWindow, _) => {
                use fixed_window as $module;
                let $s = &Default::default();
                $body
            }
            (Algorithm::SlidingLog, Inner::SlidingLog($s)) => {
                use sliding_log as $module;
                $body
            }
            (Algorithm::SlidingLog, _) => {
                use sliding_log as $module;
                let $s = &Default::default();
                $body
            }
            (Algorithm::SlidingWindow { .. }, Inner::SlidingWindow($s)) => {
                use sliding_window as $module;
                $body
            }
            (Algorithm::SlidingWindow { .. }, _) => {
                use sliding_window as $module;
                let $s = &Default::default();
                $body
            }
            (Algorithm::TokenBucket, Inner::TokenBucket($s)) => {
                use token_bucket as $module;
                $body
            }
            (Algorithm::TokenBucket, _) => {
                use token_bucket as $module;
                let $s = &Default::default();
                $body
            }
            (Algorithm::Gcra, Inner::Gcra($s)) => {
                use gcra as $module;
                $body
            }
            (Algorithm::Gcra, _) => {
                use gcra as $module;
                let $s = &Default::default();
                $body
            }
        }
    };
}

impl Limit {
    /// Would `cost` be admitted at `now`? The decision reports the state as it will be
    /// after [`commit`](Limit::commit) if admitted, or as it is if denied.
    #[inline]
    pub fn check(&self, state: &State, now: Timestamp, cost: u64) -> Decision {
        let now = now.as_micros();
        with_state!(self, &state.0, |m, s| m::check(self, s, now, cost))
    }

    /// Charges an admitted `cost` at `now`.
    #[inline]
    pub fn commit(&self, state: &mut State, now: Timestamp, cost: u64) {
        self.charge(state, now, cost, true);
    }

    /// Charges a denied `cost` at `now`, for `count_rejected` limits (see the module docs).
    #[inline]
    pub fn charge_rejected(&self, state: &mut State, now: Timestamp, cost: u64) {
        self.charge(state, now, cost, false);
    }

    #[inline]
    fn charge(&self, state: &mut State, now: Timestamp, cost: u64, admitted: bool) {
        let now = now.as_micros();
        let inner = &mut state.0;
        match (self.algorithm(), &mut *inner) {
            (Algorithm::FixedWindow, Inner::FixedWindow(s)) => {
                fixed_window::commit(self, s, now, cost, admitted)
            }
            (Algorithm::SlidingLog, Inner::SlidingLog(s)) => {
                sliding_log::commit(self, s, now, cost, admitted)
            }
            (Algorithm::SlidingWindow { .. }, Inner::SlidingWindow(s)) => {
                sliding_window::commit(self, s, now, cost, admitted)
            }
            (Algorithm::TokenBucket, Inner::TokenBucket(s)) => {
                token_bucket::commit(self, s, now, cost, admitted)
            }
            (Algorithm::Gcra, Inner::Gcra(s)) => gcra::commit(self, s, now, cost, admitted),
            (algorithm, _) => {
                *inner = match algorithm {
                    Algorithm::FixedWindow => Inner::FixedWindow(Default::default()),
                    Algorithm::SlidingLog => Inner::SlidingLog(Default::default()),
                    Algorithm::SlidingWindow { .. } => Inner::SlidingWindow(Default::default()),
                    Algorithm::TokenBucket => Inner::TokenBucket(Default::default()),
                    Algorithm::Gcra => Inner::Gcra(Default::default()),
                };
                self.charge(state, Timestamp::from_micros(now), cost, admitted);
            }
        }
    }

    /// When `state` becomes the same as no state if nothing more is charged: the
    /// expiry a store gives it (a Redis PEXPIRE, a memory-store sweep).
    #[inline]
    pub fn idle_at(&self, state: &State) -> Timestamp {
        Timestamp::from_micros(with_state!(self, &state.0, |m, s| m::idle_at(self, s)))
    }
}

// === decision helpers shared by the algorithm modules ===

#[inline]
fn micros(us: u64) -> Duration {
    Duration::from_micros(us)
}

/// An admitted decision.
#[inline]
fn allow(limit: &Limit, remaining: u64, reset_after: u64) -> Decision {
    Decision {
        outcome: Outcome::Allowed,
        limit: limit.capacity(),
        remaining: remaining.min(limit.capacity()),
        reset_after: micros(reset_after),
    }
}

/// A denied decision: for good when `cost` exceeds the capacity, else until `retry_after`.
#[inline]
fn deny(limit: &Limit, cost: u64, retry_after: u64, remaining: u64, reset_after: u64) -> Decision {
    let outcome = if cost > limit.capacity() {
        Outcome::CostExceedsCapacity
    } else {
        Outcome::Denied {
            retry_after: micros(retry_after),
        }
    };
    Decision {
        outcome,
        limit: limit.capacity(),
        remaining: remaining.min(limit.capacity()),
        reset_after: micros(reset_after),
    }
}
