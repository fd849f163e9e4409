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

use super::meter::{Meter, allow, deny};
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
}

impl Params {
    pub(crate) fn new(rate: u64, unit: u64, burst: u64) -> Params {
        Params {
            rate,
            unit,
            full: burst * unit,
            burst,
        }
    }
}

impl Bucket {
    /// `(level at now, now)`, with `now` never before the last refill.
    fn refill(&self, k: &Params, now: u64) -> (u64, u64) {
        let now = now.max(self.last);
        let gained = (now - self.last).saturating_mul(k.rate);
        (k.full.min(self.level.saturating_add(gained)), now)
    }
}

impl Meter for Params {
    type State = Bucket;

    #[inline]
    fn check(&self, s: &Bucket, now: u64, cost: u64, _member: &[u8]) -> Decision {
        let (level, _) = s.refill(self, now);
        // Time for the bucket to refill from `level` to full.
        let until_full = |level: u64| (self.full - level).div_ceil(self.rate);
        if cost <= self.burst {
            let need = cost * self.unit;
            if level >= need {
                let left = level - need;
                return allow(self.burst, left / self.unit, until_full(left));
            }
            return deny(
                self.burst,
                cost,
                (need - level).div_ceil(self.rate),
                level / self.unit,
                until_full(level),
            );
        }
        deny(self.burst, cost, 0, level / self.unit, until_full(level))
    }

    #[inline]
    fn commit(&self, s: &mut Bucket, now: u64, cost: u64, _admitted: bool, _member: &[u8]) {
        let (level, now) = s.refill(self, now);
        // Admitted: level ≥ need. Rejected (count_rejected): empty the bucket, no debt.
        let level = level.saturating_sub(cost.saturating_mul(self.unit));
        *s = Bucket { level, last: now };
    }

    #[inline]
    fn idle_at(&self, s: &Bucket) -> u64 {
        s.last
            .saturating_add(self.full.saturating_sub(s.level).div_ceil(self.rate))
    }
}
