//! The algorithms, pure: each takes the stored state, `now` and a cost, and
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
//! - A cost larger than the capacity never fits: [`Outcome::CostExceedsCapacity`](crate::Outcome::CostExceedsCapacity).
//! - A clock that steps back is treated as standing still at the newest time the
//!   state has seen: a key's time never runs backwards.
//! - `charge_rejected` (for `count_rejected` limits) charges a denied request as far
//!   as the state can hold it: counters keep counting; a token bucket or GCRA is
//!   emptied but not driven into debt; a sliding log folds the charge into its newest
//!   entry, moved to `now`. Either way a client that keeps trying stays limited until
//!   it stops, and the state stays bounded.
//! - Usage (`Limit::charge_usage`: what a request really cost, reported after it) is
//!   charged in full, past the capacity: a counter counts on, a GCRA's TAT moves past
//!   its tolerance, a token bucket's level goes below zero (see `token_bucket`), a
//!   sliding log keeps the entry (folded into the newest once over). That is a debt:
//!   a look (cost 0) is denied until the window or the refill has paid it back.
//! - A refund (`Limit::refund`: what a reservation took and did not use) gives units
//!   back as far as the state still holds them: a token bucket's level rises, never
//!   above full; a GCRA's TAT moves back, never before now; a fixed window's count
//!   falls, in the window the units were charged in only. The others refuse refunds.

mod kind;
mod meter;
mod packed;

pub mod bloom;
pub mod concurrency;
pub mod distinct;
pub mod fixed_window;
pub mod gcra;
pub mod hll;
pub mod shares;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

pub use kind::{Algorithm, Edge};
pub(crate) use packed::Packed;

use crate::decision::Decision;
use meter::Meter;

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
    Distinct(distinct::Members),
    Concurrency(concurrency::Holds),
    Shares(shares::Tree),
}

impl State {
    /// No state: nothing charged.
    pub fn new() -> Self {
        State::default()
    }

    pub(crate) const fn empty() -> Self {
        State(Inner::Empty)
    }

    /// A fixed window's state: `count` units charged in the window holding `now` of
    /// windows `window` µs long. How a store that keeps a window's count alone (a
    /// Redis key per window) hands it to the algorithm.
    pub(crate) fn fixed_window_count(now: u64, window: u64, count: u64) -> Self {
        State(Inner::FixedWindow(fixed_window::Window {
            start: now - now % window,
            count,
            mark: 0,
        }))
    }

    /// The state of a `shares` limit as the Redis script keeps it, decoded (see
    /// [`shares::Tree::from_script`]); `None` for bytes of another layout.
    pub fn shares_from_script(v: &[u8]) -> Option<State> {
        Some(State(Inner::Shares(shares::Tree::from_script(v)?)))
    }

    /// A `shares` tree's state, if this is one.
    pub(crate) fn tree(&self) -> Option<&shares::Tree> {
        match &self.0 {
            Inner::Shares(tree) => Some(tree),
            _ => None,
        }
    }

    /// Bytes this state occupies: its inline size plus what it holds on the heap.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<State>()
            + match &self.0 {
                Inner::SlidingLog(log) => log.heap_bytes(),
                Inner::SlidingWindow(buckets) => buckets.heap_bytes(),
                Inner::Distinct(members) => members.heap_bytes(),
                Inner::Concurrency(holds) => holds.heap_bytes(),
                Inner::Shares(tree) => tree.heap_bytes(),
                _ => 0,
            }
    }
}

/// A limit's algorithm with its parameters, precomputed by the algorithm's own module
/// when the limit is built.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Params {
    FixedWindow(fixed_window::Params),
    SlidingLog(sliding_log::Params),
    SlidingWindow(sliding_window::Params),
    TokenBucket(token_bucket::Params),
    Gcra(gcra::Params),
    Distinct(distinct::Params),
    Concurrency(concurrency::Params),
    Shares(shares::Params),
}

/// The one dispatch from a limit to its algorithm: `$body` with `$p` bound to the
/// algorithm's parameters, whichever it is.
macro_rules! dispatch {
    ($params:expr, |$p:ident| $body:expr) => {
        match $params {
            Params::FixedWindow($p) => $body,
            Params::SlidingLog($p) => $body,
            Params::SlidingWindow($p) => $body,
            Params::TokenBucket($p) => $body,
            Params::Gcra($p) => $body,
            Params::Distinct($p) => $body,
            Params::Concurrency($p) => $body,
            Params::Shares($p) => $body,
        }
    };
}

impl Params {
    /// `algorithm`'s parameters for `limit` per `window` µs with `burst`; `rate` and
    /// `unit` are the limit's rate reduced by gcd(limit, window) (see `Limit`); a fixed
    /// window's `calendar`, if it counts per calendar period; the longest `wait` (µs) a
    /// request of a `token_bucket`, `gcra` or `shares` limit may be admitted after; a
    /// `shares` limit's children and priorities. The caller has validated all but the
    /// tree, which fails here, saying why.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        algorithm: Algorithm,
        limit: u64,
        window: u64,
        burst: u64,
        (rate, unit): (u64, u64),
        calendar: Option<std::sync::Arc<crate::Calendar>>,
        wait: u64,
        tree: &shares::Shares,
    ) -> Result<Params, String> {
        Ok(match algorithm {
            Algorithm::FixedWindow => {
                Params::FixedWindow(fixed_window::Params::new(limit, window, calendar))
            }
            Algorithm::SlidingLog => Params::SlidingLog(sliding_log::Params::new(limit, window)),
            Algorithm::SlidingWindow { precision, edge } => {
                Params::SlidingWindow(sliding_window::Params::new(limit, window, precision, edge))
            }
            Algorithm::TokenBucket => {
                Params::TokenBucket(token_bucket::Params::new(rate, unit, burst, wait))
            }
            Algorithm::Gcra => Params::Gcra(gcra::Params::new(rate, unit, burst, wait)),
            Algorithm::Distinct { precision } => {
                Params::Distinct(distinct::Params::new(limit, window, precision))
            }
            Algorithm::Concurrency => {
                Params::Concurrency(concurrency::Params::new(limit, window, wait))
            }
            Algorithm::Shares => {
                Params::Shares(shares::validate(tree, limit, window, burst, wait)?)
            }
        })
    }

    /// A `shares` limit's parameters.
    pub(crate) fn shares(&self) -> Option<&shares::Params> {
        match self {
            Params::Shares(p) => Some(p),
            _ => None,
        }
    }

    /// A fixed window's budget alerts, at `at` thousandths of the limit.
    pub(crate) fn alerts(&mut self, at: &[u16]) {
        if let Params::FixedWindow(p) = self {
            p.alerts(at);
        }
    }

    /// A fixed window's budget alerts, in thousandths of the limit; empty without.
    pub(crate) fn alert_at(&self) -> &[u16] {
        match self {
            Params::FixedWindow(p) => p.alert_at(),
            _ => &[],
        }
    }

    /// The budget alerts a fixed window's `state` has reached in the window holding
    /// `now`, and its count there; `(0, 0)` for every other algorithm.
    pub(crate) fn reached(&self, state: &State, now: u64) -> (u8, u64) {
        match (self, &state.0) {
            (Params::FixedWindow(p), Inner::FixedWindow(w)) => p.reached(w, now),
            _ => (0, 0),
        }
    }

    /// A fixed window's calendar, when it counts per calendar period.
    pub(crate) fn calendar(&self) -> Option<&crate::Calendar> {
        match self {
            Params::FixedWindow(p) => p.calendar(),
            _ => None,
        }
    }

    /// `member` is only read by `distinct`.
    #[inline]
    pub(crate) fn check(&self, state: &State, now: u64, cost: u64, member: &[u8]) -> Decision {
        dispatch!(self, |p| read(state, |s| p.check(s, now, cost, member)))
    }

    #[inline]
    pub(crate) fn charge(
        &self,
        state: &mut State,
        now: u64,
        cost: u64,
        admitted: bool,
        member: &[u8],
    ) {
        dispatch!(self, |p| p.commit(
            Slot::get_mut(&mut state.0),
            now,
            cost,
            admitted,
            member
        ))
    }

    /// Gives back at `now` `cost` units charged at `at` (`member`: the `concurrency`
    /// hold given back); `state` holds this algorithm's state (a store refunds nothing
    /// to no state).
    pub(crate) fn refund(&self, state: &mut State, now: u64, cost: u64, at: u64, member: &[u8]) {
        dispatch!(self, |p| p.refund(
            Slot::get_mut(&mut state.0),
            now,
            cost,
            at,
            member
        ))
    }

    /// Whether a denied take bringing `member` leaves a mark (a `concurrency` limit on
    /// which `member` is held).
    pub(crate) fn marks_denied(&self, state: &State, now: u64, member: &[u8]) -> bool {
        dispatch!(self, |p| read(state, |s| p.marks_denied(s, now, member)))
    }

    /// Renews the `concurrency` hold `member` names (see `concurrency::Params::renew`);
    /// `None` for every other algorithm.
    pub(crate) fn renew(
        &self,
        state: &mut State,
        now: u64,
        cost: u64,
        member: &[u8],
    ) -> Option<Decision> {
        match self {
            Params::Concurrency(p) => Some(p.renew(Slot::get_mut(&mut state.0), now, cost, member)),
            _ => None,
        }
    }

    /// The holds of a `concurrency` state lapsed by `now` and not yet cleared (0 for
    /// every other algorithm).
    pub(crate) fn lapsed(&self, state: &State, now: u64) -> u64 {
        match (self, &state.0) {
            (Params::Concurrency(p), Inner::Concurrency(holds)) => p.lapsed(holds, now),
            _ => 0,
        }
    }

    #[inline]
    pub(crate) fn idle_at(&self, state: &State) -> u64 {
        dispatch!(self, |p| read(state, |s| p.idle_at(s)))
    }

    /// One request on its own, in one dispatch: checked, then charged if admitted
    /// (cost above 0), or if denied and `charge_denied`; a charged denial reports the
    /// state after its charge (as `Limit::charge_rejected`). Returns the decision and,
    /// when the state was charged, when it becomes the same as no state (µs).
    // Always: inlined into the store, a fixed-size state stays in registers instead of
    // going through the stack (measured on a hot key: 25.4 → 24.8 ns a check).
    #[inline(always)]
    pub(crate) fn decide(
        &self,
        state: &mut State,
        now: u64,
        cost: u64,
        member: &[u8],
        charge_denied: bool,
    ) -> (Decision, Option<u64>) {
        dispatch!(self, |p| decide_with(
            p,
            state,
            now,
            cost,
            member,
            charge_denied
        ))
    }
}

#[inline]
fn decide_with<M: Meter>(
    p: &M,
    state: &mut State,
    now: u64,
    cost: u64,
    member: &[u8],
    charge_denied: bool,
) -> (Decision, Option<u64>)
where
    M::State: Slot,
{
    let d = read(state, |s| p.check(s, now, cost, member));
    let admitted = d.allowed();
    if (admitted && cost == 0)
        || !(admitted
            || charge_denied
            || (cost > 0 && read(state, |s| p.marks_denied(s, now, member))))
    {
        return (d, None);
    }
    let s = M::State::get_mut(&mut state.0);
    p.commit(s, now, cost, admitted, member);
    // Denied and charged anyway: the decision after the charge, with what remained
    // when the request came (a denial's `remaining`, as `Limit::charge_rejected`'s).
    let d = if admitted {
        d
    } else {
        Decision {
            remaining: d.remaining,
            ..p.check(s, now, cost, member)
        }
    };
    (d, Some(p.idle_at(s)))
}

/// `f` on the state of type `T` that `state` holds, or on no state when it holds
/// another algorithm's (or none).
#[inline]
fn read<T: Slot, R>(state: &State, f: impl FnOnce(&T) -> R) -> R {
    match T::get(&state.0) {
        Some(s) => f(s),
        None => f(&T::default()),
    }
}

/// Where each algorithm's state sits in a [`State`].
trait Slot: Default + Sized {
    fn get(inner: &Inner) -> Option<&Self>;
    /// The state, replacing another algorithm's (or none) with an empty one.
    fn get_mut(inner: &mut Inner) -> &mut Self;
}

macro_rules! slot {
    ($($variant:ident => $state:ty),* $(,)?) => {$(
        impl Slot for $state {
            #[inline]
            fn get(inner: &Inner) -> Option<&Self> {
                match inner {
                    Inner::$variant(s) => Some(s),
                    _ => None,
                }
            }

            #[inline]
            fn get_mut(inner: &mut Inner) -> &mut Self {
                if !matches!(inner, Inner::$variant(_)) {
                    *inner = Inner::$variant(Default::default());
                }
                match inner {
                    Inner::$variant(s) => s,
                    _ => unreachable!("set just above"),
                }
            }
        }
    )*};
}

slot! {
    FixedWindow => fixed_window::Window,
    SlidingLog => sliding_log::Log,
    SlidingWindow => sliding_window::Buckets,
    TokenBucket => token_bucket::Bucket,
    Gcra => gcra::Tat,
    Distinct => distinct::Members,
    Concurrency => concurrency::Holds,
    Shares => shares::Tree,
}
