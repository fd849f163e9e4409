//! Sliding log: every admitted request is kept with its time and cost, so the count in
//! the window `(now − W, now]` is exact, in any window, not only aligned ones.
//!
//! A request of cost c is one entry `(at, c)`, not c entries, so weighted costs cost
//! O(1) memory and time; requests in the same microsecond share an entry. The log
//! holds at most `limit` + 1 entries (every admitted entry has cost ≥ 1; rejected
//! charges, and usage charged while in debt, fold into the newest entry), 16 bytes
//! each. Usage charged past the limit is a debt the window pays back as the entries
//! that made it leave.
//!
//! `total` caches the sum of all costs in the log, so a check subtracts only the
//! entries that have expired since the last commit (which then pops them): O(1)
//! amortised per request.

use std::collections::VecDeque;

use super::meter::{Meter, allow, deny};
use crate::decision::Decision;

/// A sliding log's parameters.
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    at: u64,
    cost: u64,
}

/// Admitted requests, oldest first, and the sum of their costs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log {
    entries: VecDeque<Entry>,
    total: u64,
}

impl Log {
    pub(super) fn heap_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
    }

    /// `now`, never before the newest entry.
    fn clamp(&self, now: u64) -> u64 {
        self.entries.back().map_or(now, |e| now.max(e.at))
    }

    /// Entries still inside the window at `now`: an entry at `at` leaves at `at + W`.
    fn live(&self, w: u64, now: u64) -> impl Iterator<Item = &Entry> {
        self.entries.iter().skip_while(move |e| e.at + w <= now)
    }

    /// The cost still inside the window at `now`.
    fn used(&self, w: u64, now: u64) -> u64 {
        let expired: u64 = self
            .entries
            .iter()
            .take_while(|e| e.at + w <= now)
            .map(|e| e.cost)
            .sum();
        self.total - expired
    }
}

impl Meter for Params {
    type State = Log;

    fn check(&self, s: &Log, now: u64, cost: u64, _member: &[u8]) -> Decision {
        let now = s.clamp(now);
        let w = self.window;
        let capacity = self.limit;
        let used = s.used(w, now);
        let newest = s.entries.back().map(|e| e.at + w);
        if cost <= capacity && used.saturating_add(cost) <= capacity {
            // Admitted: everything is restored W after the newest entry, which is now
            // (unless this is a peek).
            let reset = if cost > 0 {
                w
            } else {
                newest.map_or(0, |t| t.saturating_sub(now))
            };
            return allow(capacity, capacity - used - cost, reset);
        }
        // Denied: the same cost fits once enough of the oldest live entries have left.
        let mut need = used.saturating_add(cost) - capacity;
        let mut retry_at = now;
        if cost <= capacity {
            for e in s.live(w, now) {
                retry_at = e.at + w;
                need = need.saturating_sub(e.cost);
                if need == 0 {
                    break;
                }
            }
        }
        let reset = newest.map_or(0, |t| t.saturating_sub(now));
        deny(
            capacity,
            cost,
            retry_at - now,
            capacity.saturating_sub(used),
            reset,
        )
    }

    fn commit(&self, s: &mut Log, now: u64, cost: u64, admitted: bool, _member: &[u8]) {
        let now = s.clamp(now);
        let w = self.window;
        while let Some(e) = s.entries.front().copied().filter(|e| e.at + w <= now) {
            s.entries.pop_front();
            s.total -= e.cost;
        }
        if cost == 0 {
            return;
        }
        // Already over the limit (usage charged into debt): fold as a rejected charge.
        let over = s.total > self.limit;
        s.total = s.total.saturating_add(cost);
        match s.entries.back_mut() {
            // Same microsecond, a rejected charge, or usage charged while in debt: fold
            // into the newest entry, moved to now. Moving it later only makes it expire
            // later (stricter, never looser), and keeps the log at most `limit` + 1
            // entries however long a client keeps trying or reporting usage.
            Some(newest) if newest.at == now || !admitted || over => {
                newest.at = now;
                newest.cost = newest.cost.saturating_add(cost);
            }
            _ => s.entries.push_back(Entry { at: now, cost }),
        }
    }

    fn idle_at(&self, s: &Log) -> u64 {
        s.entries.back().map_or(0, |e| e.at + self.window)
    }
}
