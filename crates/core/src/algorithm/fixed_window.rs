//! Fixed window: one counter per window aligned to the epoch
//! (window start = now − now mod W), as the Envoy reference service counts; or per
//! period of a calendar (`Calendar`: a month from the 1st, in a time zone), whose
//! windows are as long as the calendar makes them.
//!
//! Exact within each aligned window; a client can get up to 2 × limit through in any
//! W-long span that straddles an edge (the "boundary attack").
//!
//! State: `(start, count)` — 16 bytes; and, for a limit with budget alerts, how many
//! of its thresholds the window's use has reached (`mark`: it only rises within a
//! window, so a refund below a threshold and a charge past it again alert once).

use std::sync::Arc;

use super::meter::{Meter, allow, deny};
use crate::calendar::Calendar;
use crate::decision::Decision;
use crate::limit::units_at;

/// A fixed window's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    limit: u64,
    /// µs; a calendar's longest period.
    window: u64,
    /// Windows that are a calendar's periods, instead of aligned to the epoch.
    calendar: Option<Arc<Calendar>>,
    /// Budget alerts, when it has them (behind one pointer: a `Limit` stays small).
    alerts: Option<Arc<Alerts>>,
}

/// A limit's budget alerts: each threshold in thousandths of the limit, and the first
/// unit of use at or past it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Alerts {
    at: Vec<u16>,
    units: Vec<u64>,
}

impl Params {
    pub(crate) fn new(limit: u64, window: u64, calendar: Option<Arc<Calendar>>) -> Params {
        Params {
            limit,
            window,
            calendar,
            alerts: None,
        }
    }

    /// With budget alerts at `at`, thousandths of the limit (ascending).
    pub(crate) fn alerts(&mut self, at: &[u16]) {
        let units = at.iter().map(|&t| units_at(self.limit, t)).collect();
        self.alerts = Some(Arc::new(Alerts {
            at: at.to_vec(),
            units,
        }));
    }

    /// Its budget alerts, in thousandths of the limit; empty without.
    pub(crate) fn alert_at(&self) -> &[u16] {
        self.alerts.as_ref().map_or(&[], |a| &a.at)
    }

    /// Raises `s`'s mark past every threshold its count has reached.
    #[inline]
    fn raise(&self, s: &mut Window) {
        if let Some(alerts) = &self.alerts {
            while let Some(&units) = alerts.units.get(usize::from(s.mark))
                && s.count >= units
            {
                s.mark += 1;
            }
        }
    }

    /// The thresholds the window holding `now` has reached, and its count.
    pub(crate) fn reached(&self, s: &Window, now: u64) -> (u8, u64) {
        if s.start == s.bounds_at(self, now).0 {
            (s.mark, s.count)
        } else {
            (0, 0)
        }
    }

    pub(crate) fn calendar(&self) -> Option<&Calendar> {
        self.calendar.as_deref()
    }

    /// The window holding `now`: its start and end, µs.
    #[inline]
    pub(crate) fn window_at(&self, now: u64) -> (u64, u64) {
        match &self.calendar {
            None => {
                let start = now - now % self.window;
                (start, start + self.window)
            }
            Some(c) => c.bounds(now),
        }
    }
}

/// The current window's start and what it has counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub(super) start: u64,
    pub(super) count: u64,
    /// Budget alert thresholds reached in this window (0 without alerts).
    pub(super) mark: u8,
}

impl Window {
    /// The window at `now`, its start and end (never before the stored window: a key's
    /// time only moves forward).
    #[inline]
    fn bounds_at(&self, p: &Params, now: u64) -> (u64, u64) {
        let (start, end) = p.window_at(now);
        if start >= self.start {
            (start, end)
        } else {
            p.window_at(self.start)
        }
    }

    fn used_in(&self, start: u64) -> u64 {
        if self.start == start { self.count } else { 0 }
    }
}

impl Meter for Params {
    type State = Window;

    #[inline]
    fn check(&self, s: &Window, now: u64, cost: u64, _member: &[u8]) -> Decision {
        let (start, end) = s.bounds_at(self, now);
        let now = now.max(start);
        let used = s.used_in(start);
        let capacity = self.limit;
        if cost <= capacity && used.saturating_add(cost) <= capacity {
            allow(capacity, capacity - used - cost, end - now)
        } else {
            // The count starts again at 0 in the next window, where any cost ≤ limit fits.
            deny(
                capacity,
                cost,
                end - now,
                capacity.saturating_sub(used),
                end - now,
            )
        }
    }

    #[inline]
    fn commit(&self, s: &mut Window, now: u64, cost: u64, _admitted: bool, _member: &[u8]) {
        let (start, _) = s.bounds_at(self, now);
        if s.start != start {
            *s = Window {
                start,
                count: 0,
                mark: 0,
            };
        }
        s.count = s.count.saturating_add(cost);
        self.raise(s);
    }

    /// Off the window the units were charged in, while it is the state's; a window
    /// that has ended gave its budget back with it.
    fn refund(&self, s: &mut Window, _now: u64, cost: u64, at: u64, _member: &[u8]) {
        if self.window_at(at).0 == s.start {
            s.count = s.count.saturating_sub(cost);
        }
    }

    #[inline]
    fn idle_at(&self, s: &Window) -> u64 {
        if s.count == 0 {
            0
        } else {
            self.window_at(s.start).1
        }
    }
}
