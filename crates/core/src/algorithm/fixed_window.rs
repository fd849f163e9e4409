//! Fixed window: one counter per window aligned to the epoch
//! (window start = now − now mod W), as the Envoy reference service counts.
//!
//! Exact within each aligned window; a client can get up to 2 × limit through in any
//! W-long span that straddles an edge (the "boundary attack").
//!
//! State: `(start, count)` — 16 bytes.

use super::{allow, deny};
use crate::limit::Limit;

/// The current window's start and what it has counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    start: u64,
    count: u64,
}

impl Window {
    /// Window start at `now` (never before the stored window: a key's time only moves forward).
    fn start_at(&self, limit: &Limit, now: u64) -> u64 {
        let start = now - now % limit.window_micros();
        start.max(self.start)
    }

    fn used_in(&self, start: u64) -> u64 {
        if self.start == start { self.count } else { 0 }
    }
}

pub(super) fn check(limit: &Limit, s: &Window, now: u64, cost: u64) -> crate::Decision {
    let start = s.start_at(limit, now);
    let end = start + limit.window_micros();
    let now = now.max(start);
    let used = s.used_in(start);
    let capacity = limit.limit();
    if cost <= capacity && used.saturating_add(cost) <= capacity {
        allow(limit, capacity - used - cost, end - now)
    } else {
        // The count starts again at 0 in the next window, where any cost ≤ limit fits.
        deny(
            limit,
            cost,
            end - now,
            capacity.saturating_sub(used),
            end - now,
        )
    }
}

pub(super) fn commit(limit: &Limit, s: &mut Window, now: u64, cost: u64, _admitted: bool) {
    let start = s.start_at(limit, now);
    if s.start != start {
        *s = Window { start, count: 0 };
    }
    s.count = s.count.saturating_add(cost);
}

pub(super) fn idle_at(limit: &Limit, s: &Window) -> u64 {
    if s.count == 0 {
        0
    } else {
        s.start + limit.window_micros()
    }
}
