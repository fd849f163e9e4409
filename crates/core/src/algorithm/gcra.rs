//! GCRA, the generic cell rate algorithm (leaky bucket as a meter), as redis-cell and
//! governor use it: one timestamp per key, the theoretical arrival time (TAT) — when
//! the key would be idle again if nothing more were admitted.
//!
//! A cost c advances the TAT by its emission time `e(c) = ceil(c × W / L)` µs. It is
//! admitted when the new TAT is at most `τ = e(burst)` ahead of now: an idle key takes
//! `burst` at once, then one unit per `W / L`.
//!
//! Rounding: each request's emission time is rounded *up* to a whole microsecond,
//! computed exactly in integers (`c × W'` ≤ 2^53 is guaranteed by `Limit`). The error is
//! under 1 µs per request, always in the strict direction: at most `L` per `W` plus the
//! burst, slightly fewer when `W / L` is not whole. At rates near one unit per µs the
//! rounding matters; `token_bucket` is exact there.
//!
//! State: the TAT — 8 bytes.

use super::{allow, ceil_div, deny, sat};
use crate::limit::Limit;

/// The theoretical arrival time, µs since the epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tat(u64);

/// `e(cost)`: µs of emission time for `cost` units.
fn emission(limit: &Limit, cost: u64) -> u64 {
    let (rate, unit) = limit.scaled_rate();
    sat(ceil_div(u128::from(cost) * u128::from(unit), rate.into()))
}

pub(super) fn check(limit: &Limit, s: &Tat, now: u64, cost: u64) -> crate::Decision {
    let tolerance = emission(limit, limit.burst());
    let per_unit = emission(limit, 1);
    let base = s.0.max(now);
    let tat = base.saturating_add(emission(limit, cost));
    // Units of slack left once the TAT is `t`: remaining unit-cost requests.
    let slack = |t: u64| (now.saturating_add(tolerance)).saturating_sub(t) / per_unit;
    if cost <= limit.burst() && tat - now <= tolerance {
        allow(limit, slack(tat), tat - now)
    } else {
        let retry = (tat - now).saturating_sub(tolerance);
        deny(limit, cost, retry, slack(base), base - now)
    }
}

pub(super) fn commit(limit: &Limit, s: &mut Tat, now: u64, cost: u64, admitted: bool) {
    let tat = s.0.max(now).saturating_add(emission(limit, cost));
    s.0 = if admitted {
        tat
    } else {
        // count_rejected: empty the bucket (TAT at now + τ) but never beyond.
        tat.min(now.saturating_add(emission(limit, limit.burst())).max(s.0))
    };
}

pub(super) fn idle_at(_limit: &Limit, s: &Tat) -> u64 {
    s.0
}
