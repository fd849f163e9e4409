//! GCRA, the generic cell rate algorithm (leaky bucket as a meter), as redis-cell and
//! governor use it: one timestamp per key, the theoretical arrival time (TAT) — when
//! the key would be idle again if nothing more were admitted.
//!
//! A cost c advances the TAT by its emission time `e(c) = ceil(c × W / L)` µs. It is
//! admitted when the new TAT is at most `τ = e(burst)` ahead of now: an idle key takes
//! `burst` at once, then one unit per `W / L`.
//!
//! Rounding: each request's emission time is rounded *up* to a whole microsecond,
//! computed exactly in integers (`c × W'` ≤ 2^53 is guaranteed by `Limit` for every c
//! that can fit). The error is under 1 µs per request, always in the strict direction:
//! at most `L` per `W` plus the burst, slightly fewer when `W / L` is not whole. At
//! rates near one unit per µs the rounding matters; `token_bucket` is exact there.
//!
//! `e(1)` and `τ` are computed once, when the `Limit` is built: a unit-cost check is
//! one comparison and one division (for `remaining`).
//!
//! State: the TAT — 8 bytes.

use super::{allow, deny};
use crate::limit::Limit;

/// The theoretical arrival time, µs since the epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tat(u64);

/// `e(cost)`: µs of emission time for `cost` units (saturating for costs that can
/// never fit, which only `charge_rejected` computes, to clamp them).
fn emission(limit: &Limit, cost: u64) -> u64 {
    if cost == 1 {
        return limit.gcra_times().0;
    }
    let (rate, unit) = limit.scaled_rate();
    emission_time(cost, rate, unit)
}

/// `ceil(cost × unit / rate)`: µs of emission time for `cost` units at `rate` scaled
/// units per µs and `unit` per token (see `Limit::scaled_rate`); `u64::MAX` on overflow.
/// `Limit` precomputes it for one unit and for the burst.
pub(crate) fn emission_time(cost: u64, rate: u64, unit: u64) -> u64 {
    cost.checked_mul(unit)
        .map_or(u64::MAX, |units| units.div_ceil(rate))
}

pub(super) fn check(limit: &Limit, s: &Tat, now: u64, cost: u64) -> crate::Decision {
    let (per_unit, tolerance) = limit.gcra_times();
    let base = s.0.max(now);
    // Unit-cost requests still admitted if the TAT were `t`.
    let slack = |t: u64| now.saturating_add(tolerance).saturating_sub(t) / per_unit;
    if cost <= limit.burst() {
        let tat = base + emission(limit, cost);
        if tat - now <= tolerance {
            return allow(limit, slack(tat), tat - now);
        }
        return deny(limit, cost, tat - now - tolerance, slack(base), base - now);
    }
    deny(limit, cost, 0, slack(base), base - now)
}

pub(super) fn commit(limit: &Limit, s: &mut Tat, now: u64, cost: u64, admitted: bool) {
    let tat = s.0.max(now).saturating_add(emission(limit, cost));
    s.0 = if admitted {
        tat
    } else {
        // count_rejected: empty the bucket (TAT at now + τ) but never beyond.
        tat.min(now.saturating_add(limit.gcra_times().1)).max(s.0)
    };
}

pub(super) fn idle_at(_limit: &Limit, s: &Tat) -> u64 {
    s.0
}
