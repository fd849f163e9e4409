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

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::Error;
use crate::decision::{Decision, Outcome};
use crate::limit::Limit;
use crate::time::Timestamp;

/// How a rate limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// A counter per window aligned to the epoch. Exact per window; up to 2× the limit
    /// across a window edge.
    FixedWindow,
    /// A log of admitted requests: exact in any window of length `window`.
    SlidingLog,
    /// Counters in `precision` sub-buckets of the window; approximate, see [`Edge`].
    SlidingWindow {
        /// Sub-buckets per window (1 = the classic current + previous two-bucket counter).
        precision: u32,
        /// How the oldest, partly expired sub-bucket counts.
        edge: Edge,
    },
    /// A bucket of `burst` tokens refilled at `limit` per `window`.
    TokenBucket,
    /// The generic cell rate algorithm: one timestamp per key, rate `limit` per `window`,
    /// up to `burst` at once.
    Gcra,
}

/// How `sliding_window` counts the oldest sub-bucket, the one only partly inside the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Edge {
    /// Weight it by the fraction still inside the window (Cloudflare's estimate).
    #[default]
    Interpolate,
    /// Count it whole: never admits more than an exact sliding log would (Figma's choice).
    Strict,
    /// Drop it: never denies a request an exact sliding log would admit.
    Lenient,
}

impl Algorithm {
    /// Every algorithm with its default parameters, in a stable order.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow {
            precision: 1,
            edge: Edge::Interpolate,
        },
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];

    /// The algorithm's name as written in configuration: `fixed_window`, `sliding_log`,
    /// `sliding_window`, `token_bucket`, `gcra`.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow { .. } => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether the algorithm never admits more than its bound (see the crate docs).
    pub fn is_exact(&self) -> bool {
        !matches!(self, Algorithm::SlidingWindow { .. })
    }

    pub(crate) fn has_burst(&self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::SlidingWindow { precision, edge } => {
                write!(f, "sliding_window(precision={precision}, edge={edge})")
            }
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    /// Parses an algorithm name; `sliding_window` gets precision 1 and `interpolate`.
    fn from_str(s: &str) -> Result<Self, Error> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                Error::InvalidLimit(format!(
                    "unknown algorithm `{s}` (expected one of fixed_window, sliding_log, \
                     sliding_window, token_bucket, gcra)"
                ))
            })
    }
}

impl Edge {
    /// The mode's name as written in configuration.
    pub fn name(&self) -> &'static str {
        match self {
            Edge::Interpolate => "interpolate",
            Edge::Strict => "strict",
            Edge::Lenient => "lenient",
        }
    }
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Edge {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        [Edge::Interpolate, Edge::Strict, Edge::Lenient]
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                Error::InvalidLimit(format!(
                    "unknown edge `{s}` (expected interpolate, strict or lenient)"
                ))
            })
    }
}

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

    /// Charges a denied `cost` at `now`, for `count_rejected` limits (see the module
    /// docs), and returns the decision as it stands after the charge: the ban it
    /// extended shows in `retry_after`.
    #[inline]
    pub fn charge_rejected(&self, state: &mut State, now: Timestamp, cost: u64) -> Decision {
        self.charge(state, now, cost, false);
        self.check(state, now, cost)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        }
        assert!(
            "leaky"
                .parse::<Algorithm>()
                .unwrap_err()
                .to_string()
                .contains("unknown algorithm `leaky`")
        );
        assert_eq!("strict".parse::<Edge>().unwrap(), Edge::Strict);
    }
}
