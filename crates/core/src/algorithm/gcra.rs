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
//! Waiting (a limit's `max_wait`): a request whose TAT would be up to `max_wait` past
//! `now + τ` is admitted *after* that wait, its TAT moved now. It conforms when the
//! wait ends, so whoever waits admits no more than the burst and the rate; later
//! requests queue behind it, in order.
//!
//! State: the TAT — 8 bytes.

use super::meter::{Meter, allow, deny, waited};
use crate::decision::Decision;

/// The theoretical arrival time, µs since the epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tat(pub(super) u64);

/// GCRA's parameters: the rate in scaled units (see `Limit`), and the emission times
/// computed from it once, here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    /// Scaled units gained per µs, and per unit of cost.
    rate: u64,
    unit: u64,
    burst: u64,
    /// `e(1)`, µs.
    per_unit: u64,
    /// `τ = e(burst)`, µs.
    tolerance: u64,
    /// The longest wait a request may be admitted after, µs (0: none).
    wait: u64,
}

impl Params {
    pub(crate) fn new(rate: u64, unit: u64, burst: u64, wait: u64) -> Params {
        Params {
            rate,
            unit,
            burst,
            per_unit: emission_time(1, rate, unit),
            tolerance: emission_time(burst, rate, unit),
            wait,
        }
    }

    /// `(e(1), τ)` in µs, as the Redis script is given them.
    pub(crate) fn times(&self) -> (u64, u64) {
        (self.per_unit, self.tolerance)
    }

    /// `e(cost)`: µs of emission time for `cost` units (saturating for costs that can
    /// never fit, which only `charge_rejected` computes, to clamp them).
    fn emission(&self, cost: u64) -> u64 {
        if cost == 1 {
            return self.per_unit;
        }
        emission_time(cost, self.rate, self.unit)
    }
}

/// `ceil(cost × unit / rate)` µs; past u64, never (a cost that large never fits).
fn emission_time(cost: u64, rate: u64, unit: u64) -> u64 {
    cost.checked_mul(unit)
        .map_or(u64::MAX, |units| units.div_ceil(rate))
}

impl Meter for Params {
    type State = Tat;

    #[inline]
    fn check(&self, s: &Tat, now: u64, cost: u64, _member: &[u8]) -> Decision {
        let (per_unit, tolerance) = self.times();
        let base = s.0.max(now);
        // Unit-cost requests still admitted if the TAT were `t`.
        let slack = |t: u64| now.saturating_add(tolerance).saturating_sub(t) / per_unit;
        if cost <= self.burst {
            let tat = base + self.emission(cost);
            if tat - now <= tolerance {
                return allow(self.burst, slack(tat), tat - now);
            }
            let late = tat - now - tolerance;
            if cost > 0 && late <= self.wait {
                return waited(self.burst, late, tat - now);
            }
            // Until it is admitted, after its longest wait if it may wait.
            let retry = if cost > 0 { late - self.wait } else { late };
            return deny(self.burst, cost, retry, slack(base), base - now);
        }
        deny(self.burst, cost, 0, slack(base), base - now)
    }

    #[inline]
    fn commit(&self, s: &mut Tat, now: u64, cost: u64, admitted: bool, _member: &[u8]) {
        let tat = s.0.max(now).saturating_add(self.emission(cost));
        s.0 = if admitted {
            tat
        } else {
            // count_rejected: empty the bucket (TAT at now + τ) but never beyond.
            tat.min(now.saturating_add(self.tolerance)).max(s.0)
        };
    }

    /// The TAT moved back by the units' emission time rounded down (a charge's was
    /// rounded up: never more than it took), never before `now`: a key already idle
    /// has nothing to take back.
    fn refund(&self, s: &mut Tat, now: u64, cost: u64, _at: u64, _member: &[u8]) {
        if s.0 > now {
            let back = cost.saturating_mul(self.unit) / self.rate;
            s.0 = s.0.saturating_sub(back).max(now);
        }
    }

    #[inline]
    fn idle_at(&self, s: &Tat) -> u64 {
        s.0
    }
}
