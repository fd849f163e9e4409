//! Sliding log: every admitted request is kept with its time and cost, so the count in
//! the window `(now − W, now]` is exact, in any window, not only aligned ones.
//!
//! A request of cost c is one entry `(at, c)`, not c entries, so weighted costs cost
//! O(1) memory and time; requests in the same microsecond share an entry. The log
//! holds at most `limit` entries (every admitted entry has cost ≥ 1, and rejected
//! charges fold into the newest entry), 16 bytes each.
//!
//! `total` caches the sum of all costs in the log, so a check subtracts only the
//! entries that have expired since the last commit (which then pops them): O(1)
//! amortised per request.

use std::collections::VecDeque;

use super::{allow, deny};
use crate::limit::Limit;

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
    fn live(&self, limit: &Limit, now: u64) -> impl Iterator<Item = &Entry> {
        let w = limit.window_micros();
        self.entries.iter().skip_while(move |e| e.at + w <= now)
    }

    /// The cost still inside the window at `now`.
    fn used(&self, limit: &Limit, now: u64) -> u64 {
        let w = limit.window_micros();
        let expired: u64 = self
            .entries
            .iter()
            .take_while(|e| e.at + w <= now)
            .map(|e| e.cost)
            .sum();
        self.total - expired
    }
}

pub(super) fn check(limit: &Limit, s: &Log, now: u64, cost: u64) -> crate::Decision {
    let now = s.clamp(now);
    let w = limit.window_micros();
    let capacity = limit.limit();
    let used = s.used(limit, now);
    let newest = s.entries.back().map(|e| e.at + w);
    if cost <= capacity && used.saturating_add(cost) <= capacity {
        // Admitted: everything is restored W after the newest entry, which is now
        // (unless this is a peek).
        let reset = if cost > 0 {
            w
        } else {
            newest.map_or(0, |t| t.saturating_sub(now))
        };
        return allow(limit, capacity - used - cost, reset);
    }
    // Denied: the same cost fits once enough of the oldest live entries have left.
    let mut need = used.saturating_add(cost) - capacity;
    let mut retry_at = now;
    if cost <= capacity {
        for e in s.live(limit, now) {
            retry_at = e.at + w;
            need = need.saturating_sub(e.cost);
            if need == 0 {
                break;
            }
        }
    }
    let reset = newest.map_or(0, |t| t.saturating_sub(now));
    deny(
        limit,
        cost,
        retry_at - now,
        capacity.saturating_sub(used),
        reset,
    )
}

pub(super) fn commit(limit: &Limit, s: &mut Log, now: u64, cost: u64, admitted: bool) {
    let now = s.clamp(now);
    let w = limit.window_micros();
    while let Some(e) = s.entries.front().copied().filter(|e| e.at + w <= now) {
        s.entries.pop_front();
        s.total -= e.cost;
    }
    if cost == 0 {
        return;
    }
    s.total = s.total.saturating_add(cost);
    match s.entries.back_mut() {
        // Same microsecond, or a rejected charge: fold into the newest entry, moved to
        // now. Moving it later only makes it expire later (stricter, never looser),
        // and keeps the log at most `limit` entries however long a client keeps trying.
        Some(newest) if newest.at == now || !admitted => {
            newest.at = now;
            newest.cost = newest.cost.saturating_add(cost);
        }
        _ => s.entries.push_back(Entry { at: now, cost }),
    }
}

pub(super) fn idle_at(limit: &Limit, s: &Log) -> u64 {
    s.entries.back().map_or(0, |e| e.at + limit.window_micros())
}
