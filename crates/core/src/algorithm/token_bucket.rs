//! Token bucket: `burst` tokens, refilled at `limit` per `window`; a request takes
//! `cost` tokens.
//!
//! Refill is exact, with no drift however often the bucket is read: tokens are kept
//! in scaled units where one token is `W' = window / g` units and the bucket gains
//! `L' = limit / g` units per microsecond (`g = gcd(limit, window)`). Every refill is
//! an integer multiplication, so fractional tokens are never rounded away. `Limit`
//! guarantees `burst × W' ≤ 2^53`, so the Redis script computes the same integers.
//!
//! State: `(level, last)` — 16 bytes. The empty state `(0, 0)` refills to a full
//! bucket at any real `now`, so "no state" needs no special case.

use super::{allow, ceil_div, deny, sat};
use crate::limit::Limit;

/// Scaled tokens in the bucket at time `last`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    level: u64,
    last: u64,
}

struct Scaled {
    /// Units gained per µs.
    rate: u128,
    /// Units per token.
    unit: u128,
    /// Units in a full bucket.
    full: u128,
}

fn scaled(limit: &Limit) -> Scaled {
    let (rate, unit) = limit.scaled_rate();
    Scaled {
        rate: rate.into(),
        unit: unit.into(),
        full: u128::from(limit.burst()) * u128::from(unit),
    }
}

impl Bucket {
    /// `(level at now, now)`, with `now` never before the last refill.
    fn refill(&self, k: &Scaled, now: u64) -> (u128, u64) {
        let now = now.max(self.last);
        let gained = u128::from(now - self.last) * k.rate;
        (k.full.min(u128::from(self.level) + gained), now)
    }
}

pub(super) fn check(limit: &Limit, s: &Bucket, now: u64, cost: u64) -> crate::Decision {
    let k = scaled(limit);
    let (level, _) = s.refill(&k, now);
    let need = u128::from(cost) * k.unit;
    // Time for the bucket to refill from `level` to full.
    let until_full = |level: u128| sat(ceil_div(k.full - level, k.rate));
    if cost <= limit.burst() && level >= need {
        let left = level - need;
        allow(limit, sat(left / k.unit), until_full(left))
    } else {
        let retry = sat(ceil_div(need.saturating_sub(level), k.rate));
        deny(limit, cost, retry, sat(level / k.unit), until_full(level))
    }
}

pub(super) fn commit(limit: &Limit, s: &mut Bucket, now: u64, cost: u64, _admitted: bool) {
    let k = scaled(limit);
    let (level, now) = s.refill(&k, now);
    // Admitted: level ≥ need. Rejected (count_rejected): empty the bucket, no debt.
    let level = level.saturating_sub(u128::from(cost) * k.unit);
    *s = Bucket {
        level: sat(level),
        last: now,
    };
}

pub(super) fn idle_at(limit: &Limit, s: &Bucket) -> u64 {
    let k = scaled(limit);
    let missing = k.full.saturating_sub(u128::from(s.level));
    s.last.saturating_add(sat(ceil_div(missing, k.rate)))
}
