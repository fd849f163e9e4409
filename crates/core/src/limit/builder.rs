//! [`LimitBuilder`]: a limit's parameters checked once, so that an invalid limit
//! cannot exist, and what the algorithms precompute from them.

use std::time::Duration;

use super::{Limit, MAX_ALERTS, MAX_EXACT, MAX_PRECISION, MAX_WAIT, MAX_WINDOW, Rejected, Shape};
use crate::algorithm::{Algorithm, Params, concurrency, distinct, shares::Shares};
use crate::time::micros;
use crate::{Calendar, Error};

/// Builds a [`Limit`] with optional parameters; [`build`](LimitBuilder::build) validates.
#[derive(Clone, Debug)]
pub struct LimitBuilder {
    algorithm: Algorithm,
    limit: u64,
    window: Duration,
    burst: Option<u64>,
    rejected: Rejected,
    calendar: Option<Calendar>,
    max_wait: Duration,
    shares: Shares,
    alert_at: Vec<u16>,
}

impl LimitBuilder {
    pub(super) fn new(algorithm: Algorithm, limit: u64, window: Duration) -> LimitBuilder {
        LimitBuilder {
            algorithm,
            limit,
            window,
            burst: None,
            rejected: Rejected::NotCharged,
            calendar: None,
            max_wait: Duration::ZERO,
            shares: Shares::new(),
            alert_at: Vec::new(),
        }
    }

    /// Budget alerts: the parts of the limit, in thousandths (800 for 0.8), at which a
    /// key's use in a window first reaching them is reported once
    /// ([`BatchDecision::alerts`](crate::BatchDecision::alerts)), however many servers
    /// charge it and whatever is given back meanwhile. A `fixed_window` (of a window or
    /// a calendar period) that charges only what it admits; at most [`MAX_ALERTS`],
    /// ascending, each from 1 to 1,000.
    #[inline]
    pub fn alert_at(mut self, thousandths: &[u16]) -> Self {
        self.alert_at = thousandths.to_vec();
        self
    }

    /// A `shares` limit's children and priorities (`limit` per `window` is the
    /// parent's rate, `burst` its burst). Checked by [`build`](Self::build): the
    /// children's rates add up to at most the parent's, each ceiling is between its
    /// rate and the parent's, and the parent's burst leaves the lowest priority room
    /// to borrow after every guaranteed burst and the longest wait.
    #[inline]
    pub fn shares(mut self, shares: Shares) -> Self {
        self.shares = shares;
        self
    }

    /// Admit a request that would be denied now but conforms within `wait` *after that
    /// wait* ([`Decision::wait`](crate::Decision::wait)) instead of denying it: its slot
    /// is reserved at once, so a queue of waiters never admits more than the limit
    /// promises, and a request whose wait would be longer is denied as before. Only
    /// `token_bucket` and `gcra` wait (they know when a request conforms, and a
    /// reservation there is the bucket moved on), and `shares`, whose borrowers wait
    /// for the parent; at most [`MAX_WAIT`], whole µs. A `concurrency` take waits
    /// differently: in the key's queue, for a release ([`Decision::queued`](crate::Decision::queued)).
    #[inline]
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// Count per period of `calendar` (a month from the 1st in Europe/Berlin, say)
    /// instead of per window aligned to the epoch: `fixed_window` only. The window given
    /// is replaced by the period's longest ([`Period::longest`](crate::Period::longest)),
    /// what a store sizes its keys' lifetimes by.
    #[inline]
    pub fn calendar(mut self, calendar: Calendar) -> Self {
        self.window = calendar.period().longest();
        self.calendar = Some(calendar);
        self
    }

    /// The most admitted at once (`token_bucket` bucket size, `gcra` burst).
    /// Defaults to `limit`. Only `token_bucket` and `gcra` take a burst.
    #[inline]
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Charge rejected requests too (the Envoy reference's and Figma's behaviour):
    /// a client that keeps trying while over the limit stays limited.
    #[inline]
    pub fn count_rejected(mut self, yes: bool) -> Self {
        self.rejected = if yes {
            Rejected::Charged
        } else {
            Rejected::NotCharged
        };
        self
    }

    /// Which rejected requests to charge ([`count_rejected`](Self::count_rejected) is
    /// `Charged` or `NotCharged`).
    #[inline]
    pub fn rejected(mut self, rejected: Rejected) -> Self {
        self.rejected = rejected;
        self
    }

    /// Validates the parameters.
    pub fn build(self) -> Result<Limit, Error> {
        let invalid = |msg: String| Err(Error::InvalidLimit(msg));
        let LimitBuilder {
            algorithm,
            limit,
            window,
            burst,
            rejected,
            calendar,
            max_wait,
            shares,
            alert_at,
        } = self;
        if calendar.is_some() {
            if algorithm != Algorithm::FixedWindow {
                return invalid(format!(
                    "a calendar period applies to fixed_window, not {}",
                    algorithm.name()
                ));
            }
            if rejected != Rejected::NotCharged {
                return invalid(
                    "count_rejected does not apply to a calendar period (yet): only admitted \
                     requests and usage are counted there"
                        .into(),
                );
            }
        }

        if window.subsec_nanos() % 1_000 != 0 {
            return invalid(format!(
                "window {window:?} is not a whole number of microseconds"
            ));
        }
        let window_us = micros(window);
        if window_us == 0 {
            return invalid("window must be at least 1µs".into());
        }
        if window > MAX_WINDOW {
            return invalid(format!("window {window:?} is longer than 100 years"));
        }
        if limit == 0 {
            return invalid("limit must be at least 1".into());
        }
        if limit > MAX_EXACT {
            return invalid(format!("limit {limit} is larger than 2^53"));
        }
        let burst = match burst {
            Some(_) if !algorithm.has_burst() => {
                return invalid(format!(
                    "burst applies to token_bucket, gcra and shares, not {}",
                    algorithm.name()
                ));
            }
            Some(0) => return invalid("burst must be at least 1".into()),
            Some(b) if b > MAX_EXACT => return invalid(format!("burst {b} is larger than 2^53")),
            Some(b) => b,
            None => limit,
        };
        if algorithm.counts_members() && limit > distinct::MAX_LIMIT {
            return invalid(format!(
                "limit {limit} is more than {} members for distinct (its filters take 10 \
                 bits per member)",
                distinct::MAX_LIMIT
            ));
        }
        if algorithm.holds() && limit > concurrency::MAX_LIMIT {
            return invalid(format!(
                "limit {limit} is more than {} holds at once for concurrency (each decision \
                 reads a key's holds whole)",
                concurrency::MAX_LIMIT
            ));
        }
        if algorithm.takes_member() && rejected != Rejected::NotCharged {
            return invalid(format!(
                "count_rejected does not apply to {}: a denied request {}",
                algorithm.name(),
                if algorithm.holds() {
                    "holds nothing"
                } else {
                    "is not counted"
                }
            ));
        }
        if let Algorithm::SlidingWindow { precision, .. } | Algorithm::Distinct { precision } =
            algorithm
        {
            if precision == 0 {
                return invalid("precision must be at least 1".into());
            }
            if let Algorithm::Distinct { .. } = algorithm
                && precision > distinct::MAX_PRECISION
            {
                return invalid(format!(
                    "precision {precision} is more than {} sub-windows for distinct \
                     (each may hold a 12–16 KB sketch)",
                    distinct::MAX_PRECISION
                ));
            }
            if precision > MAX_PRECISION {
                return invalid(format!(
                    "precision {precision} is more than {MAX_PRECISION} sub-buckets"
                ));
            }
            if u64::from(precision) > window_us {
                return invalid(format!(
                    "precision {precision} is larger than the window in µs ({window_us})"
                ));
            }
            if !window_us.is_multiple_of(u64::from(precision)) {
                return invalid(format!(
                    "window {window_us}µs does not split into {precision} equal sub-buckets"
                ));
            }
        }

        let g = gcd(limit, window_us);
        let (rate_per_micro, units_per_token) = (limit / g, window_us / g);
        if algorithm.has_burst()
            && u128::from(burst) * u128::from(units_per_token) > u128::from(MAX_EXACT)
        {
            return invalid(format!(
                "burst {burst} × window {window_us}µs / gcd(limit, window) = {} is larger than 2^53; \
                 pick a limit that divides the window more evenly, or a smaller burst",
                u128::from(burst) * u128::from(units_per_token)
            ));
        }

        if !max_wait.is_zero() {
            if !algorithm.has_burst() && algorithm != Algorithm::Concurrency {
                return invalid(format!(
                    "max_wait applies to token_bucket, gcra, shares and concurrency, not {}: \
                     the first three know when a request would fit, and a concurrency take \
                     waits in the key's queue for a release",
                    algorithm.name()
                ));
            }
            if max_wait > MAX_WAIT || max_wait.subsec_nanos() % 1_000 != 0 {
                return invalid(format!(
                    "max_wait {max_wait:?} is not a whole number of µs up to an hour"
                ));
            }
            if algorithm.has_burst()
                && u128::from(micros(max_wait)) * u128::from(rate_per_micro) > u128::from(MAX_EXACT)
            {
                return invalid(format!(
                    "max_wait {max_wait:?} at {limit} per {window_us}µs is more than 2^53 \
                     units of waiting; pick a shorter wait"
                ));
            }
        }

        // Both fit in u64: burst × units_per_token ≤ 2^53 was checked above (and is
        // irrelevant for the algorithms without a burst, which never read these).
        if shares != Shares::new() && algorithm != Algorithm::Shares {
            return invalid(format!(
                "children and priorities apply to shares, not {}",
                algorithm.name()
            ));
        }
        if !alert_at.is_empty() {
            if algorithm != Algorithm::FixedWindow || rejected != Rejected::NotCharged {
                return invalid(format!(
                    "alert_at applies to a fixed_window budget that counts what it admits \
                     (a window or a calendar period, metered or not), not {}{}",
                    algorithm.name(),
                    if rejected == Rejected::NotCharged {
                        ""
                    } else {
                        " with count_rejected"
                    }
                ));
            }
            if alert_at.len() > MAX_ALERTS {
                return invalid(format!(
                    "alert_at has {} thresholds; at most {MAX_ALERTS}",
                    alert_at.len()
                ));
            }
            if alert_at.iter().any(|&t| t == 0 || t > 1000)
                || alert_at.windows(2).any(|w| w[0] >= w[1])
            {
                return invalid(
                    "alert_at thresholds are parts of the limit above 0 and up to 1 (at most \
                     three decimals), ascending, each once"
                        .into(),
                );
            }
        }
        let mut params = Params::new(
            algorithm,
            limit,
            window_us,
            burst,
            (rate_per_micro, units_per_token),
            calendar.map(std::sync::Arc::new),
            micros(max_wait),
            &shares,
        )
        .map_err(Error::InvalidLimit)?;
        if !alert_at.is_empty() {
            params.alerts(&alert_at);
        }
        let shape = Shape::of(algorithm, limit, window_us, burst, &params);
        Ok(Limit {
            algorithm,
            limit,
            window: window_us,
            burst,
            rejected,
            wait: micros(max_wait),
            rate_per_micro,
            units_per_token,
            params,
            shape,
        })
    }
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
