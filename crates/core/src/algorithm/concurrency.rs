//! Concurrency: at most `limit` *holds* live at once per key — requests in flight,
//! open streams, running jobs — rather than requests per unit of time. A request
//! brings the id of its hold (a request id) and takes `cost` holds under it; it is
//! admitted while the holds live stay within the limit. The hold is given back by its
//! id (a release: a [refund](crate::Request::refund) that names it), or lapses on its
//! own `window` µs (its *lease*) after it was taken: a holder that crashed, was
//! killed or lost its network frees its slots without anyone's help.
//!
//! An id names a hold; it is never a way in. A client may choose its id (Envoy passes
//! a client's `x-request-id` on unless told not to), so:
//!
//! - A take whose id is already held is one more hold, checked against the limit like
//!   any other: naming a held id admits nothing on its own. Renewing a hold is its own
//!   call ([`Request::renew`](crate::Request::renew)), never a take.
//! - A release gives back what one take of that id left, and no more: one hold, or the
//!   *mark* a denied take of that id left. A denied take (by this limit or another of
//!   its batch) of an id that is held leaves a mark of cost 0 that takes no slot and
//!   lapses with a lease; the release that follows it (Envoy sends one at stream end
//!   for every request, denied or not) gives back the mark, not the hold of the other
//!   request that named the id. A denied take of an id not held leaves nothing (its
//!   release finds nothing to give back), so ids that are unique, as every honest
//!   caller's are, never cost a mark. At most [`MAX_MARKS`] marks are kept (the
//!   soonest to lapse goes first past it).
//! - A hold is live at `now` while `now` is before its lapse: never more than `limit`
//!   holds are live, on every store, whatever the interleaving (a take is checked
//!   against the live holds, in the same atomic round that adds it).
//! - `retry_after` is truthful if nobody gives a hold back: when enough of the live
//!   holds lapse for the cost to fit. `reset_after` is when the last one lapses.
//! - Cost 0 only looks. A release of an id not held (given back already, lapsed, never
//!   taken) changes nothing.
//!
//! State: the holds and marks, each with its id, cost and lapse time, and the newest
//! time seen (a clock that steps back neither revives nor shortens a hold): at most
//! `limit` holds and [`MAX_MARKS`] marks, each 16 bytes plus its id.

use super::meter::{Meter, allow, deny};
use crate::decision::Decision;

/// The lease of a hold when a policy does not say (its `window`): a holder that never
/// gives its hold back frees it after a minute. A call that may run longer renews its
/// hold before then.
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// The most holds a concurrency limit may allow: each decision reads the key's holds
/// whole (in Redis, one string), so they stay a few kilobytes with ids of request-id
/// length.
pub const MAX_LIMIT: u64 = 1_000;

/// The most marks (denied takes whose release is still to come) a key keeps. Each
/// lives until its release, within a lease; past this many, the soonest to lapse goes.
pub const MAX_MARKS: usize = 64;

/// How long a key's state is kept after its last hold lapses, µs: long enough for the
/// next take or release on the key to count the holds that lapsed. The same for every
/// lease: two limits of one shape share a key whatever their leases (a changed lease
/// keeps the holds), so whether the state is still there must not depend on the lease
/// of the limit that reads it.
const LAPSED_KEPT: u64 = 60_000_000;

/// A concurrency limit's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    limit: u64,
    /// The lease, µs.
    lease: u64,
}

impl Params {
    pub(crate) fn new(limit: u64, lease: u64) -> Params {
        Params { limit, lease }
    }
}

/// One hold: its id, how many slots it takes, and when it lapses (µs). A mark (a
/// denied take, its release still to come) is a hold of cost 0.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hold {
    id: Box<[u8]>,
    cost: u64,
    lapse: u64,
}

/// A key's holds, and the newest time a charge saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    holds: Vec<Hold>,
    newest: u64,
}

impl Holds {
    pub(super) fn heap_bytes(&self) -> usize {
        self.holds.capacity() * std::mem::size_of::<Hold>()
            + self.holds.iter().map(|h| h.id.len()).sum::<usize>()
    }

    /// The holds live at `now` (marks too: they take no slot).
    fn live(&self, now: u64) -> impl Iterator<Item = &Hold> + Clone {
        self.holds.iter().filter(move |h| h.lapse > now)
    }

    /// When the last hold lapses (0 with none); marks are not holds.
    fn last_lapse(&self) -> u64 {
        self.holds
            .iter()
            .filter(|h| h.cost > 0)
            .map(|h| h.lapse)
            .max()
            .unwrap_or(0)
    }

    /// When the last hold or mark lapses (0 with none): until then the state matters.
    fn last_entry_lapse(&self) -> u64 {
        self.holds.iter().map(|h| h.lapse).max().unwrap_or(0)
    }

    /// Drops what has lapsed by `now`.
    fn clear_lapsed(&mut self, now: u64) {
        self.holds.retain(|h| h.lapse > now);
    }

    /// The index of the entry of `id` that a release gives back: a mark first (the
    /// soonest to lapse), else the hold soonest to lapse.
    fn released(&self, id: &[u8]) -> Option<usize> {
        self.holds
            .iter()
            .enumerate()
            .filter(|(_, h)| &*h.id == id)
            .min_by_key(|(_, h)| (h.cost > 0, h.lapse))
            .map(|(i, _)| i)
    }

    /// `now`, never before the newest time a charge saw.
    fn at(&self, now: u64) -> u64 {
        now.max(self.newest)
    }
}

impl Params {
    /// How many of `s`'s holds have lapsed by `now` and are still kept: the next charge
    /// (a take or a release) clears them, and the store counts them then. None once
    /// the state itself is idle (a store may have dropped it whole by then).
    pub(crate) fn lapsed(&self, s: &Holds, now: u64) -> u64 {
        let now = s.at(now);
        if self.idle_at(s) <= now {
            return 0;
        }
        s.holds
            .iter()
            .filter(|h| h.lapse <= now && h.cost > 0)
            .count() as u64
    }

    /// Renews at `now` the hold named `id`: its lease starts again (the soonest to
    /// lapse, when several share the id), whatever the others hold. A hold that has
    /// lapsed is taken again when `cost` fits. The decision: admitted when the hold is
    /// live after it; denied, as a take is, when it had lapsed and does not fit.
    pub(crate) fn renew(&self, s: &mut Holds, now: u64, cost: u64, id: &[u8]) -> Decision {
        let now = s.at(now);
        s.clear_lapsed(now);
        s.newest = now;
        let lapse = now + self.lease;
        let held = s
            .holds
            .iter_mut()
            .filter(|h| h.cost > 0 && &*h.id == id)
            .min_by_key(|h| h.lapse);
        if let Some(h) = held {
            h.lapse = h.lapse.max(lapse);
            return self.check(s, now, 0, id);
        }
        let d = self.check(s, now, cost, id);
        if d.allowed() && cost > 0 {
            self.commit(s, now, cost, true, id);
        }
        d
    }

    /// When enough of `live` (using `used` slots) lapse for `cost` more to fit.
    fn fits_at<'a>(&self, live: impl Iterator<Item = &'a Hold>, used: u64, cost: u64) -> u64 {
        let mut lapses: Vec<(u64, u64)> = live.map(|h| (h.lapse, h.cost)).collect();
        lapses.sort_unstable();
        let mut left = used;
        for (lapse, freed) in lapses {
            left -= freed;
            if left + cost <= self.limit {
                return lapse;
            }
        }
        // Unreachable for a cost within the limit: with every hold lapsed, it fits.
        0
    }
}

impl Meter for Params {
    type State = Holds;

    fn check(&self, s: &Holds, now: u64, cost: u64, _id: &[u8]) -> Decision {
        let now = s.at(now);
        let limit = self.limit;
        let live = s.live(now);
        let used: u64 = live.clone().map(|h| h.cost).sum();
        let until = |lapse: u64| lapse.saturating_sub(now);
        let taken = (cost > 0).then_some(now + self.lease);
        let reset = until(s.last_lapse().max(taken.unwrap_or(0)));
        if cost == 0 {
            return allow(limit, limit.saturating_sub(used), until(s.last_lapse()));
        }
        if cost > limit {
            return deny(
                limit,
                cost,
                0,
                limit.saturating_sub(used),
                until(s.last_lapse()),
            );
        }
        if used + cost <= limit {
            return allow(limit, limit - used - cost, reset);
        }
        let retry = self.fits_at(live, used, cost) - now;
        deny(
            limit,
            cost,
            retry,
            limit.saturating_sub(used),
            until(s.last_lapse()),
        )
    }

    /// A denied take of `id` leaves a mark while `id` is held.
    fn marks_denied(&self, s: &Holds, now: u64, id: &[u8]) -> bool {
        s.live(s.at(now)).any(|h| h.cost > 0 && &*h.id == id)
    }

    /// A take: `admitted`, one more hold of `id` (another of the same id counts on
    /// its own); denied, a mark of `id` that its release will give back (a denied take
    /// takes no slot). `count_rejected` does not apply (`Limit` refuses it).
    fn commit(&self, s: &mut Holds, now: u64, cost: u64, admitted: bool, id: &[u8]) {
        if cost == 0 {
            return;
        }
        let now = s.at(now);
        s.clear_lapsed(now);
        let cost = if admitted { cost } else { 0 };
        if cost == 0 && s.holds.iter().filter(|h| h.cost == 0).count() >= MAX_MARKS {
            let soonest = s.holds.iter().enumerate().filter(|(_, h)| h.cost == 0);
            if let Some((i, _)) = soonest.min_by_key(|(_, h)| h.lapse) {
                s.holds.remove(i);
            }
        }
        s.holds.push(Hold {
            id: id.into(),
            cost,
            lapse: now + self.lease,
        });
        s.newest = now;
    }

    /// A release: what one take of `id` left is given back, a mark before a hold.
    fn refund(&self, s: &mut Holds, now: u64, _cost: u64, _at: u64, id: &[u8]) {
        let now = s.at(now);
        s.clear_lapsed(now);
        if let Some(i) = s.released(id) {
            s.holds.remove(i);
        }
        s.newest = now;
    }

    /// [`LAPSED_KEPT`] after the last hold lapses: the state is kept that long for its
    /// lapsed holds to be counted (`lapsed`) by the next take or release on the key.
    fn idle_at(&self, s: &Holds) -> u64 {
        match s.last_entry_lapse() {
            0 => 0,
            last => last + LAPSED_KEPT,
        }
    }
}
