//! Distinct: how many different *members* a key is seen with per window — distinct
//! IPs per API key, accounts per device, recipients per sender — rather than how many
//! requests. A request brings a member: one already counted in the window is admitted
//! and adds nothing; a new one is admitted while the count stays within the limit,
//! else denied and not counted. Cost 1 counts, cost 0 only asks.
//!
//! The window W is `precision` (P) sub-windows of `w = W / P` µs aligned to the epoch,
//! and the count at `now` (sub-window `j`) is the union of sub-windows `j−P+1 ..= j`:
//! the current one and the P−1 before it, between W − w and W of trailing time. With
//! P = 1 that is a fixed window, as `fixed_window` counts requests: at most `limit`
//! distinct members per aligned window. A member seen again is moved to the current
//! sub-window, so it stays counted while it keeps coming. The edge is the lenient one
//! (sub-window `j−P` is not counted) because it is the one fixed windows have, and the
//! one a sketch can honour exactly: the strict edge would need the partly-expired
//! sub-window's members, which a HyperLogLog cannot tell apart.
//!
//! Two representations, chosen by the limit, the same in both stores:
//!
//! - **Exact** (limit ≤ [`EXACT_MAX`]): each member with the sub-window it was last
//!   seen in. Never more than `limit` members are live (a new one is added only while
//!   there is room), so the state is bounded by the limit: a few hundred bytes for
//!   "3 IPs per key".
//! - **Sketch** (limit above, up to [`MAX_LIMIT`]): per sub-window a HyperLogLog exactly
//!   as Redis keeps them ([`hll`](super::hll)) and a Bloom filter of 10 bits per member
//!   the limit allows ([`bloom`]). The count is the estimate of the live
//!   HyperLogLogs' union, within about 0.81% (1.04/√16384) of the truth; a member is
//!   counted when a live filter holds it. So a counted member is never denied, and a new
//!   one is admitted while the count is below the limit: past it, only the filter's false
//!   positives (about 1%) get through (measured by `spillway simulate --algorithms distinct`,
//!   in docs/algorithms.md). A HyperLogLog alone cannot tell: a new member that raises no
//!   register looks counted, and past a few thousand members most raise none. Per
//!   sub-window up to 16 KB + limit × 10 bits here, 12 KB + the same bits in Redis; the
//!   filters grow a 64-byte block at a time, so a group that saw one member is small.
//!
//! `retry_after` is truthful: the first sub-window edge at which the member would be
//! admitted if nothing else came (exact: once the `limit`-th most recent member's
//! sub-window leaves; sketch: once the count of the sub-windows still live is below the
//! limit).

use std::borrow::Cow;

use super::bloom::{self, Bloom};
use super::hll::Registers;
use super::meter::{Meter, allow, deny};
use crate::decision::{Decision, Outcome};

/// The largest limit counted exactly; above it, a HyperLogLog per sub-window.
pub const EXACT_MAX: u64 = 100;

/// Whether a limit of `limit` distinct members is counted exactly.
pub fn is_exact(limit: u64) -> bool {
    limit <= EXACT_MAX
}

/// The longest member (1 KiB): an IP, an account id, an email address, a path.
pub const MAX_MEMBER: usize = 1024;

/// The largest distinct limit: its Bloom filters take up to 10 bits per member (12.5 MB per
/// sub-window at this limit).
pub const MAX_LIMIT: u64 = 10_000_000;

/// The most sub-windows a distinct limit may have: each may hold a sketch (16 KB here,
/// 12 KB and a key of its own in Redis), and a check merges the live ones.
pub const MAX_PRECISION: u32 = 60;

/// A distinct limit's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    limit: u64,
    precision: u64,
    /// Sub-window width, µs.
    width: u64,
}

impl Params {
    pub(crate) fn new(limit: u64, window: u64, precision: u32) -> Params {
        let precision = u64::from(precision);
        Params {
            limit,
            precision,
            width: window / precision,
        }
    }

    /// Whether members are kept exactly (else in HyperLogLogs).
    pub fn is_exact(&self) -> bool {
        is_exact(self.limit)
    }

    /// The oldest sub-window still counted at sub-window `j`.
    fn oldest(&self, j: u64) -> u64 {
        (j + 1).saturating_sub(self.precision)
    }

    /// When a state whose newest sub-window is `newest` is the same as none.
    fn end(&self, newest: u64) -> u64 {
        (newest + self.precision).saturating_mul(self.width)
    }

    /// The sub-window at `now` and `now` itself, never before the state's newest.
    fn at(&self, s: &Members, now: u64) -> (u64, u64) {
        let j = (now / self.width).max(s.newest);
        (j, now.max(j * self.width))
    }

    /// The first sub-window edge after `j` at which a member new now would be admitted.
    fn retry_at(&self, s: &Members, j: u64) -> u64 {
        let edge = |k: u64| (j + k) * self.width;
        match &s.seen {
            Seen::Exact(members) => {
                // The limit-th most recent sub-window among the live members: once it
                // leaves, fewer than `limit` remain.
                let mut live: Vec<u64> = members
                    .iter()
                    .map(|(_, b)| *b)
                    .filter(|b| *b >= self.oldest(j))
                    .collect();
                live.sort_unstable_by(|a, b| b.cmp(a));
                let nth = live[(self.limit - 1) as usize];
                self.end(nth)
            }
            Seen::Sketch(windows) => (1..=self.precision)
                .find(|&k| Members::count(windows, self.oldest(j + k)) < self.limit)
                .map_or(edge(self.precision), edge),
        }
    }
}

/// What a key has seen: members with their last sub-window, or a sketch per
/// sub-window, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    seen: Seen,
    /// The newest sub-window charged.
    newest: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Exact(Vec<(Box<[u8]>, u64)>),
    Sketch(Vec<Window>),
}

/// One sub-window of a sketch.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Window {
    at: u64,
    registers: Registers,
    bloom: Bloom,
}

impl Default for Seen {
    fn default() -> Self {
        Seen::Exact(Vec::new())
    }
}

impl Members {
    pub(super) fn heap_bytes(&self) -> usize {
        match &self.seen {
            Seen::Exact(members) => {
                members.capacity() * std::mem::size_of::<(Box<[u8]>, u64)>()
                    + members.iter().map(|(m, _)| m.len()).sum::<usize>()
            }
            Seen::Sketch(windows) => {
                windows.capacity() * std::mem::size_of::<Window>()
                    + windows
                        .iter()
                        .map(|w| w.registers.heap_bytes() + w.bloom.heap_bytes())
                        .sum::<usize>()
            }
        }
    }

    fn is_empty(&self) -> bool {
        match &self.seen {
            Seen::Exact(members) => members.is_empty(),
            Seen::Sketch(windows) => windows.is_empty(),
        }
    }

    /// The estimated count of sub-windows `from ..`: their HyperLogLogs' union,
    /// borrowed when only one is live (always, with precision 1).
    fn count(windows: &[Window], from: u64) -> u64 {
        let mut live = windows.iter().filter(|w| w.at >= from);
        let union = match (live.next(), live.clone().next()) {
            (None, _) => return 0,
            (Some(only), None) => Cow::Borrowed(&only.registers),
            (Some(first), Some(_)) => {
                let mut union = first.registers.clone();
                live.for_each(|w| union.merge(&w.registers));
                Cow::Owned(union)
            }
        };
        union.count()
    }
}

impl Meter for Params {
    type State = Members;

    fn check(&self, s: &Members, now: u64, cost: u64, member: &[u8]) -> Decision {
        let (j, now) = self.at(s, now);
        let oldest = self.oldest(j);
        let limit = self.limit;
        let reset = |newest: u64| {
            if s.is_empty() && cost == 0 {
                0
            } else {
                self.end(newest).saturating_sub(now)
            }
        };
        // (already counted, count before, count after) at sub-window j.
        let (known, before, after) = match &s.seen {
            Seen::Exact(members) => {
                let live = members.iter().filter(|(_, b)| *b >= oldest);
                let count = live.clone().count() as u64;
                let known = live.clone().any(|(m, _)| &**m == member);
                (known, count, if known { count } else { count + 1 })
            }
            Seen::Sketch(windows) => {
                let at = bloom::positions(member, bloom::bits(limit));
                let known = windows
                    .iter()
                    .any(|w| w.at >= oldest && w.bloom.contains(&at));
                let count = Members::count(windows, oldest);
                (known, count, if known { count } else { count + 1 })
            }
        };
        if cost > 1 {
            return Decision {
                outcome: Outcome::CostExceedsCapacity,
                ..allow(limit, limit.saturating_sub(before), reset(s.newest))
            };
        }
        let charged = if cost == 1 { j } else { s.newest };
        if known {
            return allow(limit, limit.saturating_sub(before), reset(charged));
        }
        if after <= limit {
            let remaining = limit.saturating_sub(if cost == 1 { after } else { before });
            return allow(limit, remaining, reset(charged));
        }
        deny(
            limit,
            cost,
            self.retry_at(s, j) - now,
            limit.saturating_sub(before),
            reset(s.newest),
        )
    }

    /// `count_rejected` does not apply (`Limit` refuses it): a charge is an admission.
    fn commit(&self, s: &mut Members, now: u64, cost: u64, _admitted: bool, member: &[u8]) {
        if cost == 0 {
            return;
        }
        let (j, _) = self.at(s, now);
        let oldest = self.oldest(j);
        if s.is_empty() && !self.is_exact() {
            s.seen = Seen::Sketch(Vec::new());
        }
        match &mut s.seen {
            Seen::Exact(members) => {
                members.retain(|(_, b)| *b >= oldest);
                match members.iter_mut().find(|(m, _)| &**m == member) {
                    Some((_, b)) => *b = j,
                    None => members.push((member.into(), j)),
                }
            }
            Seen::Sketch(windows) => {
                windows.retain(|w| w.at >= oldest);
                if windows.last().is_none_or(|w| w.at != j) {
                    windows.push(Window {
                        at: j,
                        registers: Registers::default(),
                        bloom: Bloom::default(),
                    });
                }
                let w = windows.last_mut().expect("pushed");
                w.registers.add(member);
                let bits = bloom::bits(self.limit);
                w.bloom.insert(&bloom::positions(member, bits), bits);
            }
        }
        s.newest = j;
    }

    fn idle_at(&self, s: &Members) -> u64 {
        if s.is_empty() { 0 } else { self.end(s.newest) }
    }
}
