//! Concurrency: at most `limit` *holds* live at once per key — requests in flight,
//! open streams, running jobs — rather than requests per unit of time. A request
//! brings the id of its hold (a request id) and takes `cost` holds under it; it is
//! admitted while the holds live stay within the limit. The hold is given back by its
//! id (a release: a [refund](crate::Request::refund) that names it), or lapses on its
//! own `window` µs (its *lease*) after it was last taken: a holder that crashed, was
//! killed or lost its network frees its slots without anyone's help.
//!
//! - A take whose id is already held renews that hold: its lease starts again from
//!   `now`, its cost stays what it was, and it is admitted whatever the others hold (a
//!   retried take never counts twice; a long call renews by taking again).
//! - A hold is live at `now` while `now` is before its lapse: never more than `limit`
//!   holds are live, on every store, whatever the interleaving (a take is checked
//!   against the live holds, in the same atomic round that adds it).
//! - `retry_after` is truthful if nobody gives a hold back: when enough of the live
//!   holds lapse for the cost to fit. `reset_after` is when the last one lapses.
//! - Cost 0 only looks. A release of an id not held (given back already, lapsed, never
//!   taken) changes nothing.
//!
//! State: the holds, each with its id, cost and lapse time, and the newest time seen
//! (a clock that steps back neither revives nor shortens a hold): at most `limit`
//! holds, each 16 bytes plus its id.

use super::meter::{Meter, allow, deny};
use crate::decision::Decision;

/// The lease of a hold when a policy does not say (its `window`): a holder that never
/// gives its hold back frees it after a minute. A call that may run longer renews its
/// hold (takes it again) before then.
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// The most holds a concurrency limit may allow: each decision reads the key's holds
/// whole (in Redis, one string), so they stay a few kilobytes with ids of request-id
/// length.
pub const MAX_LIMIT: u64 = 1_000;

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

/// One hold: its id, how many slots it takes, and when it lapses (µs).
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

    /// The holds live at `now`.
    fn live(&self, now: u64) -> impl Iterator<Item = &Hold> + Clone {
        self.holds.iter().filter(move |h| h.lapse > now)
    }

    /// When the last hold lapses (0 with none).
    fn last_lapse(&self) -> u64 {
        self.holds.iter().map(|h| h.lapse).max().unwrap_or(0)
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
        s.holds.iter().filter(|h| h.lapse <= now).count() as u64
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

    fn check(&self, s: &Holds, now: u64, cost: u64, id: &[u8]) -> Decision {
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
        if live.clone().any(|h| &*h.id == id) {
            return allow(limit, limit.saturating_sub(used), reset);
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

    /// `count_rejected` does not apply (`Limit` refuses it): a charge is a take.
    fn commit(&self, s: &mut Holds, now: u64, cost: u64, _admitted: bool, id: &[u8]) {
        if cost == 0 {
            return;
        }
        let now = s.at(now);
        let lapse = now + self.lease;
        s.holds.retain(|h| h.lapse > now);
        match s.holds.iter_mut().find(|h| &*h.id == id) {
            Some(h) => h.lapse = h.lapse.max(lapse),
            None => s.holds.push(Hold {
                id: id.into(),
                cost,
                lapse,
            }),
        }
        s.newest = now;
    }

    /// A release: the hold named `id` is given back (the units are its own).
    fn refund(&self, s: &mut Holds, now: u64, _cost: u64, _at: u64, id: &[u8]) {
        let now = s.at(now);
        s.holds.retain(|h| h.lapse > now && &*h.id != id);
        s.newest = now;
    }

    /// [`LAPSED_KEPT`] after the last hold lapses: the state is kept that long for its
    /// lapsed holds to be counted (`lapsed`) by the next take or release on the key.
    fn idle_at(&self, s: &Holds) -> u64 {
        match s.last_lapse() {
            0 => 0,
            last => last + LAPSED_KEPT,
        }
    }
}
