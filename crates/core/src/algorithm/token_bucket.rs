//! Token bucket: `burst` tokens, refilled at `limit` per `window`; a request takes
//! `cost` tokens.
//!
//! Refill is exact, with no drift however often the bucket is read: tokens are kept
//! in scaled units where one token is `W' = window / g` units and the bucket gains
//! `L' = limit / g` units per microsecond (`g = gcd(limit, window)`). Every refill is
//! an integer multiplication, so fractional tokens are never rounded away. `Limit`
//! guarantees `burst × W' ≤ 2^53`, so every level fits in u64 and the Redis script
//! computes the same integers in Lua doubles.
//!
//! State: `(level, last)` — 16 bytes. The empty state `(0, 0)` refills to a full
//! bucket at any real `now`, so "no state" needs no special case.
//!
//! Debt (usage charged past the level, `Limit::charge_usage`) is kept in the same two
//! numbers, exactly: a debt of D units at `now` is the bucket that will hold
//! `t·rate − D` at `last = now + t`, `t = ⌈D / rate⌉`. The level at any time counts
//! from `last` in both directions (`level + (at − last)·rate`), so before `last` it is
//! below zero: the debt, shrinking at the rate. A clock behind `last` for any other
//! reason sees the bucket as it was then: emptier, never fuller (so a clock that steps
//! back never gains tokens).
//!
//! Waiting (a limit's `max_wait`): a request that the bucket will hold within
//! `max_wait` is admitted *after* that wait, its tokens taken now, into the same debt:
//! the bucket is at zero when the wait ends, so whoever waits admits no more than the
//! burst and the rate, and later requests queue behind it.

use super::meter::{Meter, allow, deny, waited};
use crate::decision::Decision;

/// Scaled tokens in the bucket at time `last`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub(super) level: u64,
    pub(super) last: u64,
}

/// A token bucket's parameters, in scaled units (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    /// Units gained per µs.
    rate: u64,
    /// Units per token.
    unit: u64,
    /// Units in a full bucket (≤ 2^53).
    full: u64,
    burst: u64,
    /// The longest wait a request may be admitted after, µs (0: none).
    wait: u64,
}

impl Params {
    pub(crate) fn new(rate: u64, unit: u64, burst: u64, wait: u64) -> Params {
        Params {
            rate,
            unit,
            full: burst * unit,
            burst,
            wait,
        }
    }
}

impl Bucket {
    /// The level at `now` in scaled units: below zero while in debt (or for a clock
    /// behind `last`), at most full.
    fn level_at(&self, k: &Params, now: u64) -> i128 {
        let level = i128::from(self.level);
        if now >= self.last {
            let gained = i128::from(now - self.last) * i128::from(k.rate);
            i128::from(k.full).min(level + gained)
        } else {
            level - i128::from(self.last - now) * i128::from(k.rate)
        }
    }

    /// The bucket holding `level` (scaled units, below zero in debt) at `now`.
    fn holding(k: &Params, level: i128, now: u64) -> Bucket {
        match u64::try_from(level) {
            Ok(level) => Bucket { level, last: now },
            Err(_) => {
                // In debt: the time it takes to pay back, and what is left over then.
                let debt = level.unsigned_abs();
                let rate = u128::from(k.rate);
                let t = debt.div_ceil(rate);
                Bucket {
                    level: (t * rate - debt) as u64,
                    last: now.saturating_add(t as u64),
                }
            }
        }
    }
}

/// Units of a level that may be below zero, as the whole tokens a decision reports.
fn tokens(level: i128, unit: u64) -> u64 {
    u64::try_from(level).map_or(0, |l| l / unit)
}

impl Meter for Params {
    type State = Bucket;

    #[inline]
    fn check(&self, s: &Bucket, now: u64, cost: u64, _member: &[u8]) -> Decision {
        let level = s.level_at(self, now);
        // Time for the bucket to refill from `level` to full.
        let until_full = |level: i128| {
            let missing = (i128::from(self.full) - level) as u128;
            missing.div_ceil(u128::from(self.rate)) as u64
        };
        if cost <= self.burst {
            let need = i128::from(cost * self.unit);
            if level >= need {
                let left = level - need;
                return allow(self.burst, tokens(left, self.unit), until_full(left));
            }
            let retry = ((need - level) as u128).div_ceil(u128::from(self.rate)) as u64;
            if cost > 0 && retry <= self.wait {
                return waited(self.burst, retry, until_full(level - need));
            }
            // Until it is admitted, after its longest wait if it may wait.
            let retry = if cost > 0 { retry - self.wait } else { retry };
            return deny(
                self.burst,
                cost,
                retry,
                tokens(level, self.unit),
                until_full(level),
            );
        }
        deny(
            self.burst,
            cost,
            0,
            tokens(level, self.unit),
            until_full(level),
        )
    }

    #[inline]
    fn commit(&self, s: &mut Bucket, now: u64, cost: u64, admitted: bool, _member: &[u8]) {
        // Kept at `now` even behind `last`: the level is a line in time, and the same
        // line read from either point (above zero; below, `holding` moves `last` on).
        let level = s.level_at(self, now);
        let need = i128::from(cost) * i128::from(self.unit);
        let level = if admitted {
            // Admitted (level ≥ need), or usage: in full, into debt if need be.
            level - need
        } else if level < 0 {
            // count_rejected while already in debt: already worse than empty.
            return;
        } else {
            // count_rejected: empty the bucket, no debt.
            (level - need).max(0)
        };
        *s = Bucket::holding(self, level, now);
    }

    /// Back into the bucket at `now`, never above full: tokens that would have
    /// overflowed while they were out are not given back.
    fn refund(&self, s: &mut Bucket, now: u64, cost: u64, _at: u64, _member: &[u8]) {
        let level = s.level_at(self, now) + i128::from(cost) * i128::from(self.unit);
        *s = Bucket::holding(self, level.min(i128::from(self.full)), now);
    }

    #[inline]
    fn idle_at(&self, s: &Bucket) -> u64 {
        s.last
            .saturating_add(self.full.saturating_sub(s.level).div_ceil(self.rate))
    }
}
