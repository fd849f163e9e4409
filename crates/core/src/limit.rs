//! `Limit`: an algorithm with its parameters, checked once when it is built so that
//! an invalid limit cannot exist.
//!
//! Every number a limit holds, and every product the algorithms form from them, stays
//! below 2^53: the Redis scripts compute with Lua doubles, and the Rust algorithms are
//! their specification decision for decision, so both must be exact on the same inputs.

use std::fmt;
use std::time::Duration;

use crate::Error;
use crate::algorithm::{Algorithm, Params, State, gcra};
use crate::time::Timestamp;

mod builder;
mod decide;
mod shape;

pub use builder::LimitBuilder;
pub(crate) use builder::gcd;
pub use shape::Shape;
pub(crate) use shape::{Kind, MAX_ID as MAX_SHAPE_ID, Shapes};

/// The largest count, cost or scaled quantity Spillway computes with: 2^53, the
/// largest integer below which every integer is exact in an IEEE double.
pub const MAX_EXACT: u64 = 1 << 53;

/// The longest window: 100 years of 365 days.
pub const MAX_WINDOW: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The most sub-buckets a `sliding_window` limit may have. A check is O(precision).
pub const MAX_PRECISION: u32 = 10_000;

/// The longest a request may be admitted after ([`LimitBuilder::max_wait`]): an hour.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The first unit of use at or past `thousandths` of `limit`.
pub(crate) fn units_at(limit: u64, thousandths: u16) -> u64 {
    // limit ≤ 2^53 and thousandths ≤ 1,000: the product fits.
    (limit * u64::from(thousandths)).div_ceil(1000).max(1)
}

/// The most budget alert thresholds one limit may have
/// ([`LimitBuilder::alert_at`]).
pub const MAX_ALERTS: usize = 8;

/// Which requests of a denied batch a limit is charged for (a batch is all or nothing:
/// see [`Store`](crate::Store)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rejected {
    /// None: only admitted requests count (the default).
    #[default]
    NotCharged,
    /// All of them, whichever limit denied (`count_rejected`: the Envoy reference's and
    /// Figma's behaviour, a client that keeps trying while over stays limited).
    Charged,
    /// Only those this limit denied itself: a request that another limit of the batch
    /// denied costs it nothing (the reference's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    ChargedWhenOwn,
}

/// A validated rate limit: `limit` units per `window`, counted by `algorithm`.
///
/// ```
/// use spillway_core::{Algorithm, Limit};
/// use std::time::Duration;
///
/// let per_minute = Limit::new(Algorithm::Gcra, 100, Duration::from_secs(60)).unwrap();
/// assert_eq!(per_minute.capacity(), 100);
///
/// let bursty = Limit::builder(Algorithm::TokenBucket, 10, Duration::from_secs(1))
///     .burst(50)
///     .build()
///     .unwrap();
/// assert_eq!(bursty.capacity(), 50);
///
/// let err = Limit::new(Algorithm::FixedWindow, 10, Duration::ZERO).unwrap_err();
/// assert_eq!(err.to_string(), "invalid limit: window must be at least 1µs");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    algorithm: Algorithm,
    limit: u64,
    window: u64,
    burst: u64,
    rejected: Rejected,
    /// The longest wait a request may be admitted after, µs (0: none).
    wait: u64,
    /// `limit / gcd(limit, window)`: refill per µs in scaled units (token bucket, GCRA).
    rate_per_micro: u64,
    /// `window / gcd(limit, window)`: scaled units per token (token bucket, GCRA).
    units_per_token: u64,
    /// The algorithm's own parameters, precomputed by its module.
    params: Params,
    /// What its stored state belongs to (see [`Limit::shape`]).
    shape: Shape,
}

impl Limit {
    /// `limit` units per `window`, counted by `algorithm`, with default parameters.
    pub fn new(algorithm: Algorithm, limit: u64, window: Duration) -> Result<Limit, Error> {
        Limit::builder(algorithm, limit, window).build()
    }

    /// A builder for a limit with a burst or `count_rejected`.
    pub fn builder(algorithm: Algorithm, limit: u64, window: Duration) -> LimitBuilder {
        LimitBuilder::new(algorithm, limit, window)
    }

    /// The calendar whose periods a `fixed_window` limit counts in, if it does
    /// ([`LimitBuilder::calendar`]).
    #[inline]
    pub fn calendar(&self) -> Option<&crate::Calendar> {
        self.params.calendar()
    }

    /// Its budget alerts, in thousandths of the limit, ascending; empty without.
    #[inline]
    pub fn alert_at(&self) -> &[u16] {
        self.params.alert_at()
    }

    /// The first unit of use at or past each of its budget alerts, ascending.
    pub fn alert_units(&self) -> impl Iterator<Item = u64> + '_ {
        self.alert_at().iter().map(|&t| units_at(self.limit, t))
    }

    /// How many budget alerts `state` has reached in the window holding `now`, and
    /// the use counted there.
    pub(crate) fn reached(&self, state: &State, now: Timestamp) -> (u8, u64) {
        self.params.reached(state, now.as_micros())
    }

    /// The algorithm and its parameters.
    #[inline]
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Units per window.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window)
    }

    /// The window in microseconds.
    #[inline]
    pub fn window_micros(&self) -> u64 {
        self.window
    }

    /// The most admitted at once: `burst` for `token_bucket` and `gcra`, else `limit`.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The longest a request may wait for its turn rather than be denied
    /// ([`LimitBuilder::max_wait`]; zero: none).
    #[inline]
    pub fn max_wait(&self) -> Duration {
        Duration::from_micros(self.wait)
    }

    /// The most units this limit can ever admit at once, which is what
    /// [`Decision::limit`](crate::Decision::limit) reports: `burst` for `token_bucket`
    /// and `gcra`, `limit` for the windowed algorithms.
    #[inline]
    pub fn capacity(&self) -> u64 {
        if self.algorithm.has_burst() {
            self.burst
        } else {
            self.limit
        }
    }

    /// A `shares` limit's terms for the request `member` names (its child, at its
    /// priority: see [`shares::member`](crate::algorithm::shares::member)): the child's
    /// name as the tree keeps it (`*` for an unlisted one) and what a decision needs.
    /// `None` for other algorithms or an empty member.
    pub fn share_terms(&self, member: &[u8]) -> Option<(&[u8], &crate::algorithm::shares::Terms)> {
        self.params.shares()?.terms(member)
    }

    /// What [`Decision::limit`](crate::Decision::limit) reports for a request bringing
    /// `member`: a `shares` child's burst, else [`capacity`](Limit::capacity).
    #[inline]
    pub fn capacity_for(&self, member: &[u8]) -> u64 {
        match self.share_terms(member) {
            Some((_, terms)) => terms.burst,
            None => self.capacity(),
        }
    }

    /// The member of a request to this `shares` limit from `child` at priority `level`
    /// (0 the highest; past the lowest is the lowest): a child the tree does not list
    /// is [`shares::OTHERS`](crate::algorithm::shares::OTHERS), so a value of any
    /// length names a child of at most 256 bytes.
    pub fn share_member(&self, child: &str, level: u8) -> Vec<u8> {
        let listed = self
            .params
            .shares()
            .is_some_and(|p| p.lists(child.as_bytes()));
        let child = if listed {
            child
        } else {
            crate::algorithm::shares::OTHERS
        };
        crate::algorithm::shares::member(child, level)
    }

    /// A `shares` limit's tree as given (`*` included).
    pub fn shares(&self) -> Option<&crate::algorithm::shares::Shares> {
        Some(self.params.shares()?.spec())
    }

    /// A `shares` limit's parent pace and longest wait (µs).
    pub fn share_parent(&self) -> Option<(crate::algorithm::shares::Pace, u64)> {
        Some(self.params.shares()?.parent())
    }

    /// How a `shares` limit would admit `member`'s request of `cost` at `now` on
    /// `state`: within its guarantee, borrowed (fair or past its share, after a wait),
    /// or denied. `None` for other algorithms.
    pub fn share_path(
        &self,
        state: &crate::State,
        now: crate::Timestamp,
        cost: u64,
        member: &[u8],
    ) -> Option<crate::algorithm::shares::Path> {
        let tree = state.tree().cloned().unwrap_or_default();
        self.params
            .shares()?
            .path(&tree, now.as_micros(), cost, member)
    }

    /// Where `member`'s request of `cost` stands in a `shares` limit at `now` on
    /// `state` (its path and wait, and what its child's guarantee, its borrowing and
    /// the parent have left), for `explain`. `None` for other algorithms.
    pub fn share_place(
        &self,
        state: &crate::State,
        now: crate::Timestamp,
        cost: u64,
        member: &[u8],
    ) -> Option<crate::algorithm::shares::Place> {
        let tree = state.tree().cloned().unwrap_or_default();
        self.params
            .shares()?
            .place(&tree, now.as_micros(), cost, member)
    }

    /// What the algorithm promises: the most units it admits in any window of length
    /// `window` (fixed windows: `limit` per aligned window, so twice that across an
    /// edge; token bucket and GCRA: a full burst plus a window's refill). `None` for
    /// the approximate `sliding_window` edges (`interpolate`, `lenient`).
    pub fn most_in_any_window(&self) -> Option<u64> {
        let l = self.limit;
        match self.algorithm {
            Algorithm::FixedWindow => Some(2 * l),
            Algorithm::SlidingLog
            | Algorithm::SlidingWindow {
                edge: crate::Edge::Strict,
                ..
            } => Some(l),
            // The parent's: whoever borrows or is guaranteed.
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::Shares => Some(self.burst + l),
            // Counts members or holds, not requests.
            Algorithm::SlidingWindow { .. }
            | Algorithm::Distinct { .. }
            | Algorithm::Concurrency => None,
        }
    }

    /// Whether rejected requests are charged too (some or all of them: see
    /// [`rejected`](Limit::rejected)).
    pub fn count_rejected(&self) -> bool {
        self.rejected != Rejected::NotCharged
    }

    /// Which rejected requests the limit is charged for.
    pub fn rejected(&self) -> Rejected {
        self.rejected
    }

    /// Whether a request of a denied batch is charged to this limit, given whether this
    /// limit itself denied it.
    #[inline]
    pub fn charges_rejected(&self, denied_here: bool) -> bool {
        match self.rejected {
            Rejected::NotCharged => false,
            Rejected::Charged => true,
            Rejected::ChargedWhenOwn => denied_here,
        }
    }

    /// The same limit, charging rejected requests too (same shape, same state): a sync
    /// flush adds hits that were already admitted, whatever the count now says.
    pub fn counting_rejected(&self) -> Limit {
        self.with_rejected(Rejected::Charged)
    }

    /// The same limit (same shape, same state), charged for `rejected` requests. A
    /// `distinct` or `concurrency` limit never charges rejected requests (a denied
    /// member is not counted, a denied take holds nothing): it comes back unchanged.
    pub fn with_rejected(&self, rejected: Rejected) -> Limit {
        if self.algorithm.takes_member() {
            return self.clone();
        }
        Limit {
            rejected,
            ..self.clone()
        }
    }

    /// `(limit, window µs)` divided by their gcd: `(refill per µs, units per token)`,
    /// the integer rate `token_bucket` and `gcra` compute with. Exposed for stores that
    /// run the algorithms elsewhere (the Redis script takes them as arguments).
    #[inline]
    pub fn scaled_rate(&self) -> (u64, u64) {
        (self.rate_per_micro, self.units_per_token)
    }

    /// GCRA's `(emission interval of one unit, tolerance)` in µs: `e(1)` and
    /// `τ = e(burst)`, computed once when the limit is built.
    #[inline]
    pub fn gcra_times(&self) -> (u64, u64) {
        match &self.params {
            Params::Gcra(p) => p.times(),
            // Not read for other algorithms; the same numbers, for a uniform answer.
            _ => {
                gcra::Params::new(self.rate_per_micro, self.units_per_token, self.burst, 0).times()
            }
        }
    }

    /// What a stored state belongs to: limits with the same shape share state for a key.
    /// The capacity is not part of it for the counting algorithms and GCRA (whose state
    /// is a time), so raising or lowering such a limit keeps its counts. A token
    /// bucket's level is kept in units of its rate and is full at its burst, so its
    /// shape includes both: a changed token bucket starts full. A sketched `distinct`
    /// limit's filters are sized by its limit: a changed one starts empty.
    #[inline]
    pub fn shape(&self) -> Shape {
        self.shape
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(calendar) = self.calendar() {
            write!(f, "{} per {calendar} ({})", self.limit, self.algorithm)?;
            return self.write_alerts(f);
        }
        if self.algorithm.holds() {
            return write!(
                f,
                "{} at once (concurrency, lease {:?})",
                self.limit,
                self.window()
            );
        }
        write!(
            f,
            "{} per {:?} ({})",
            self.limit,
            self.window(),
            self.algorithm
        )?;
        if self.algorithm.has_burst() && self.burst != self.limit {
            write!(f, " burst {}", self.burst)?;
        }
        if let Some(tree) = self.params.shares() {
            write!(f, " over {}", tree.spec())?;
        }
        if self.wait > 0 {
            write!(f, " waiting up to {:?}", self.max_wait())?;
        }
        self.write_alerts(f)
    }
}

impl Limit {
    /// ` alerts at 0.8, 1` for a limit with budget alerts.
    fn write_alerts(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &t) in self.alert_at().iter().enumerate() {
            let sep = if i == 0 { " alerts at " } else { ", " };
            write!(f, "{sep}{}", f64::from(t) / 1000.0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edge;

    fn err(b: LimitBuilder) -> String {
        b.build().unwrap_err().to_string()
    }

    #[test]
    fn what_each_algorithm_promises_in_any_window() {
        let w = Duration::from_secs(1);
        let most = |a| {
            Limit::builder(a, 10, w)
                .build()
                .unwrap()
                .most_in_any_window()
        };
        assert_eq!(most(Algorithm::FixedWindow), Some(20));
        assert_eq!(most(Algorithm::SlidingLog), Some(10));
        let sliding = |edge| Algorithm::SlidingWindow {
            precision: 10,
            edge,
        };
        assert_eq!(most(sliding(Edge::Strict)), Some(10));
        assert_eq!(most(sliding(Edge::Interpolate)), None);
        let gcra = Limit::builder(Algorithm::Gcra, 10, w)
            .burst(3)
            .build()
            .unwrap();
        assert_eq!(gcra.most_in_any_window(), Some(13));
    }

    #[test]
    fn invalid_limits_cannot_be_built_and_say_why() {
        let s = Duration::from_secs(1);
        let sw = |precision| Algorithm::SlidingWindow {
            precision,
            edge: Edge::Strict,
        };
        assert!(err(Limit::builder(Algorithm::Gcra, 0, s)).contains("limit must be at least 1"));
        assert!(
            err(Limit::builder(
                Algorithm::Gcra,
                1,
                Duration::from_nanos(1500)
            ))
            .contains("whole number")
        );
        assert!(
            err(Limit::builder(Algorithm::FixedWindow, 1, s).burst(3)).contains("burst applies")
        );
        assert!(err(Limit::builder(Algorithm::Gcra, 1, s).burst(0)).contains("burst must be"));
        assert!(err(Limit::builder(sw(0), 1, s)).contains("precision must be"));
        assert!(err(Limit::builder(sw(7), 1, s)).contains("equal sub-buckets"));
        let distinct = |precision| Algorithm::Distinct { precision };
        assert!(err(Limit::builder(distinct(61), 1, s * 61)).contains("60 sub-windows"));
        assert!(Limit::new(distinct(60), 1, s * 60).is_ok());
        assert!(err(Limit::builder(distinct(1), 10_000_001, s)).contains("10000000 members"));
        assert!(
            err(Limit::builder(sw(10), 1, Duration::from_micros(5)))
                .contains("larger than the window")
        );
        assert!(err(Limit::builder(Algorithm::Gcra, MAX_EXACT + 1, s)).contains("2^53"));
        assert!(err(Limit::builder(Algorithm::Gcra, 1, MAX_WINDOW + s)).contains("100 years"));
        // 1,000,003 (prime) per day with a huge burst: scaled units overflow 2^53.
        assert!(
            err(Limit::builder(
                Algorithm::TokenBucket,
                1_000_003,
                Duration::from_secs(86_400)
            )
            .burst(1 << 30))
            .contains("divides the window")
        );
    }

    #[test]
    fn scaled_rate_is_reduced_by_the_gcd() {
        let l = Limit::new(Algorithm::TokenBucket, 100, Duration::from_secs(60)).unwrap();
        assert_eq!(l.scaled_rate(), (1, 600_000));
    }

    #[test]
    fn shape_ignores_capacity_but_not_window_or_algorithm() {
        let a = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(1)).unwrap();
        let b = Limit::new(Algorithm::Gcra, 20, Duration::from_secs(1)).unwrap();
        let c = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(2)).unwrap();
        let d = Limit::new(Algorithm::TokenBucket, 10, Duration::from_secs(1)).unwrap();
        assert_eq!(a.shape(), b.shape());
        assert_ne!(a.shape(), c.shape());
        assert_ne!(a.shape(), d.shape());
    }

    /// Found by the Redis differential test: two token buckets of one window but
    /// different rates shared a state whose level each read in its own units.
    #[test]
    fn token_bucket_shape_includes_rate_and_burst() {
        let tb = |n, burst| {
            Limit::builder(Algorithm::TokenBucket, n, Duration::from_secs(7))
                .burst(burst)
                .build()
                .unwrap()
        };
        assert_eq!(tb(1, 1).shape(), tb(1, 1).shape());
        assert_ne!(tb(1, 1).shape(), tb(2, 1).shape());
        assert_ne!(tb(1, 1).shape(), tb(1, 2).shape());
    }
}
