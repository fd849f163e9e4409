//! Fixed window: one counter per window aligned to the epoch
//! (window start = now − now mod W), as the Envoy reference service counts.
//!
//! Exact within each aligned window; a client can get up to 2 × limit through in any
//! W-long span that straddles an edge (the "boundary attack").
//!
//! State: `(start, count)` — 16 bytes.

use super::meter::{Meter, allow, deny};
use crate::decision::Decision;

/// A fixed window's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    limit: u64,
    /// µs.
    window: u64,
}

impl Params {
    pub(crate) fn new(limit: u64, window: u64) -> Params {
        Params { limit, window }
    }
}

/// The current window's start and what it has counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub(super) start: u64,
    pub(super) count: u64,
}

impl Window {
    /// Window start at `now` (never before the stored window: a key's time only moves forward).
    fn start_at(&self, p: &Params, now: u64) -> u64 {
        let start = now - now % p.window;
        start.max(self.start)
    }

    fn used_in(&self, start: u64) -> u64 {
        if self.start == start { self.count } else { 0 }
    }
}

impl Meter for Params {
    type State = Window;

    #[inline]
    fn check(&self, s: &Window, now: u64, cost: u64, _member: &[u8]) -> Decision {
        let start = s.start_at(self, now);
        let end = start + self.window;
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
        let start = s.start_at(self, now);
        if s.start != start {
            *s = Window { start, count: 0 };
        }
        s.count = s.count.saturating_add(cost);
    }

    #[inline]
    fn idle_at(&self, s: &Window) -> u64 {
        if s.count == 0 {
            0
        } else {
            s.start + self.window
        }
    }
}
