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

use super::{allow, deny};
use crate::limit::Limit;

/// Scaled tokens in the bucket at time `last`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    level: u64,
    last: u64,
}

struct Scaled {
    /// Units gained per µs.
    rate: u64,
    /// Units per token.
    unit: u64,
    /// Units in a full bucket (≤ 2^53).
    full: u64,
}

fn scaled(limit: &Limit) -> Scaled {
    let (rate, unit) = limit.scaled_rate();
    Scaled {
        rate,
        unit,
        full: limit.burst() * unit,
    }
}

impl Bucket {
    /// `(level at now, now)`, with `now` never before the last refill.
    fn refill(&self, k: &Scaled, now: u64) -> (u64, u64) {
        let now = now.max(self.last);
        let gained = (now - self.last).saturating_mul(k.rate);
        (k.full.min(self.level.saturating_add(gained)), now)
    }
}

pub(super) fn check(limit: &Limit, s: &Bucket, now: u64, cost: u64) -> crate::Decision {
    let k = scaled(limit);
    let (level, _) = s.refill(&k, now);
    // Time for the bucket to refill from `level` to full.
    let until_full = |level: u64| (k.full - level).div_ceil(k.rate);
    if cost <= limit.burst() {
        let need = cost * k.unit;
        if level >= need {
            let left = level - need;
            return allow(limit, left / k.unit, until_full(left));
        }
        return deny(
            limit,
            cost,
            (need - level).div_ceil(k.rate),
            level / k.unit,
            until_full(level),
        );
    }
    deny(limit, cost, 0, level / k.unit, until_full(level))
}

pub(super) fn commit(limit: &Limit, s: &mut Bucket, now: u64, cost: u64, _admitted: bool) {
    let k = scaled(limit);
    let (level, now) = s.refill(&k, now);
    // Admitted: level ≥ need. Rejected (count_rejected): empty the bucket, no debt.
    let level = level.saturating_sub(cost.saturating_mul(k.unit));
    *s = Bucket { level, last: now };
}

pub(super) fn idle_at(limit: &Limit, s: &Bucket) -> u64 {
    let k = scaled(limit);
    s.last
        .saturating_add(k.full.saturating_sub(s.level).div_ceil(k.rate))
}
