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
//! **Waiting for a release** (`max_wait`): a take that does not fit may wait in the
//! key's queue, first come first served across every replica, instead of being denied
//! at once. Its place is kept in the state as a *waiter* (its cost and a nonce the
//! service made, never the caller's id) and the take's member is a [`Ticket`] then:
//!
//! - A take with a [`TicketKind::Queue`] ticket is admitted when it fits and no live
//!   waiter is ahead of it (a newcomer never passes the queue: a freed slot is kept
//!   for the head); otherwise it is denied and *queued* ([`Decision::queued`]): it joins
//!   the queue's end, or keeps its place when it is in it. The service takes again
//!   with the same ticket after a release (or a poll) until it is admitted or its
//!   `max_wait` has passed, when it tries a last time ([`TicketKind::Last`]): admitted
//!   at its place if it fits, else denied and out of the queue.
//! - A waiter lapses [`WAITER_GRACE`] (or `max_wait`, the shorter) after its take last
//!   asked: a waiter whose replica died frees its place without anyone's help, and one
//!   that gave up and said so ([`TicketKind::Leave`]) leaves no trace at once. A take
//!   another limit of its batch denied leaves the queue too.
//! - At most [`MAX_WAITERS`] wait per key: past it a take is denied, not queued.
//! - A [`TicketKind::Plain`] take (a caller that cannot wait) never queues, and never
//!   passes the queue either.
//!
//! State: the holds and marks, each with its id, cost and lapse time, the waiters in
//! arrival order, and the newest time seen (a clock that steps back neither revives
//! nor shortens a hold): at most `limit` holds, [`MAX_MARKS`] marks and
//! [`MAX_WAITERS`] waiters, each 16 bytes plus its id.

use super::meter::{Meter, allow, deny};
use crate::decision::Decision;

/// The most waiters one key's queue keeps: past it a take that would wait is denied.
pub const MAX_WAITERS: usize = 64;

/// How long a waiter keeps its place after its take last asked (or its `max_wait`,
/// when shorter): its service asks again well within it while it waits
/// ([`TicketKind::Queue`]), so only a waiter nobody speaks for any more (its replica
/// died) lapses this way.
pub const WAITER_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How a take on a `concurrency` limit with `max_wait` stands to the key's queue: the
/// first byte of its [`Ticket`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TicketKind {
    /// A caller that cannot wait: admitted when it fits and nobody waits, else denied.
    #[default]
    Plain,
    /// A take that waits its turn: admitted at the head of the queue, else queued.
    Queue,
    /// The last try of a take that waited (its `max_wait` is up, or its service holds
    /// no more waiters): admitted at its place when it fits, else denied, not queued,
    /// and out of the queue.
    Last,
    /// A release from a take that waited and gave up: its waiter leaves the queue (a
    /// hold it got meanwhile is not touched).
    Leave,
    /// A release from a take cancelled while it waited or took: its waiter leaves the
    /// queue, or, if it got its hold, the hold is given back (as a plain release).
    GiveBack,
}

impl TicketKind {
    fn byte(self) -> u8 {
        match self {
            TicketKind::Plain => b'p',
            TicketKind::Queue => b'q',
            TicketKind::Last => b'e',
            TicketKind::Leave => b'l',
            TicketKind::GiveBack => b'g',
        }
    }

    /// A take that has (or may take) a place in the queue.
    fn waits(self) -> bool {
        matches!(self, TicketKind::Queue | TicketKind::Last)
    }

    fn of(byte: u8) -> Option<TicketKind> {
        [
            TicketKind::Plain,
            TicketKind::Queue,
            TicketKind::Last,
            TicketKind::Leave,
            TicketKind::GiveBack,
        ]
        .into_iter()
        .find(|k| k.byte() == byte)
    }
}

/// A take's place in a waiting `concurrency` limit's queue: what it does there and
/// the nonce that names its waiter. On a limit with `max_wait`, a member that is
/// [`Ticket::member`] (a NUL byte, its kind's byte, the nonce in 16 hex digits, then
/// the hold's id) brings a ticket; any other member is a hold's id alone, a plain take
/// (so ids that begin with a NUL byte are not for these limits). The service makes a
/// ticket for every request to such a limit, around the id its client sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticket {
    /// What the request does in the queue.
    pub kind: TicketKind,
    /// Names its waiter: made by the service for each request, never by a client.
    pub nonce: u64,
}

/// The bytes of a ticket before the hold's id.
pub const TICKET_BYTES: usize = 18;

impl Ticket {
    /// A ticket of `kind` for the waiter `nonce`.
    pub fn new(kind: TicketKind, nonce: u64) -> Ticket {
        Ticket { kind, nonce }
    }

    /// [`member`](Ticket::member) of a text id, as text.
    pub fn member_str(&self, id: &str) -> String {
        format!("\0{}{:016x}{id}", char::from(self.kind.byte()), self.nonce)
    }

    /// The member of a request bringing this ticket and the hold id `id`.
    pub fn member(&self, id: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(TICKET_BYTES + id.len());
        m.push(0);
        m.push(self.kind.byte());
        m.extend_from_slice(format!("{:016x}", self.nonce).as_bytes());
        m.extend_from_slice(id);
        m
    }

    /// The same ticket, doing `kind`.
    pub fn doing(self, kind: TicketKind) -> Ticket {
        Ticket { kind, ..self }
    }
}

/// A member read as a ticket: its kind, its waiter's nonce and the hold's id. A member
/// that is no ticket (too short, no NUL first, no kind) is a plain take of it whole.
fn read_ticket(member: &[u8]) -> (TicketKind, &[u8], &[u8]) {
    match member {
        [0, kind, ..] if member.len() >= TICKET_BYTES => match TicketKind::of(*kind) {
            Some(kind) => (kind, &member[2..TICKET_BYTES], &member[TICKET_BYTES..]),
            None => (TicketKind::Plain, &[], member),
        },
        _ => (TicketKind::Plain, &[], member),
    }
}

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
    /// The longest a take may wait in the queue, µs (0: no queue, members are ids).
    wait: u64,
}

impl Params {
    pub(crate) fn new(limit: u64, lease: u64, wait: u64) -> Params {
        Params { limit, lease, wait }
    }

    /// `member` as this limit reads it: a ticket's kind, nonce and id with a queue, the
    /// id alone without.
    fn ticket<'m>(&self, member: &'m [u8]) -> (TicketKind, &'m [u8], &'m [u8]) {
        if self.wait == 0 {
            return (TicketKind::Plain, &[], member);
        }
        read_ticket(member)
    }

    /// When a waiter asking at `now` lapses unless it asks again.
    fn waiter_lapse(&self, now: u64) -> u64 {
        now + self.wait.min(WAITER_GRACE.as_micros() as u64)
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

/// A key's holds, its waiters (each a `Hold` named by its nonce, lapsing when it
/// loses its place), in arrival order, and the newest time a charge saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    holds: Vec<Hold>,
    waiters: Vec<Hold>,
    newest: u64,
}

impl Holds {
    pub(super) fn heap_bytes(&self) -> usize {
        (self.holds.capacity() + self.waiters.capacity()) * std::mem::size_of::<Hold>()
            + self.holds.iter().map(|h| h.id.len()).sum::<usize>()
            + self.waiters.iter().map(|h| h.id.len()).sum::<usize>()
    }

    /// The waiters live at `now`, in arrival order.
    fn waiting(&self, now: u64) -> impl Iterator<Item = &Hold> + Clone {
        self.waiters.iter().filter(move |w| w.lapse > now)
    }

    /// The place of the waiter `nonce` among those live at `now` (0: the head).
    fn place(&self, now: u64, nonce: &[u8]) -> Option<usize> {
        if nonce.is_empty() {
            return None;
        }
        self.waiting(now).position(|w| &*w.id == nonce)
    }

    /// The waiter `nonce` leaves the queue; whether it was in it.
    fn leave(&mut self, nonce: &[u8]) -> bool {
        let at = self.waiters.iter().position(|w| &*w.id == nonce);
        if let Some(i) = at {
            self.waiters.remove(i);
        }
        at.is_some()
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

    /// When the last hold, mark or waiter lapses (0 with none): until then the state
    /// matters.
    fn last_entry_lapse(&self) -> u64 {
        self.holds
            .iter()
            .chain(&self.waiters)
            .map(|h| h.lapse)
            .max()
            .unwrap_or(0)
    }

    /// Drops what has lapsed by `now`.
    fn clear_lapsed(&mut self, now: u64) {
        self.holds.retain(|h| h.lapse > now);
        self.waiters.retain(|w| w.lapse > now);
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
    pub(crate) fn renew(&self, s: &mut Holds, now: u64, cost: u64, member: &[u8]) -> Decision {
        let (_, _, id) = self.ticket(member);
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
            return self.check(s, now, 0, member);
        }
        let d = self.check(s, now, cost, member);
        if d.allowed() && cost > 0 {
            self.commit(s, now, cost, true, member);
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

    fn check(&self, s: &Holds, now: u64, cost: u64, member: &[u8]) -> Decision {
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
        // Waiters ahead: its own place, or the whole queue for a newcomer.
        let (kind, nonce, _) = self.ticket(member);
        let place = kind.waits().then(|| s.place(now, nonce)).flatten();
        let waiting = s.waiting(now);
        let ahead = place.unwrap_or_else(|| waiting.clone().count());
        if ahead == 0 && used + cost <= limit {
            return allow(limit, limit - used - cost, reset);
        }
        // When enough holds lapse, or the waiters ahead would have, nobody asking.
        let lapse_ahead = waiting.take(ahead).map(|w| w.lapse).max().unwrap_or(0);
        let fits = if used + cost <= limit {
            now
        } else {
            self.fits_at(live, used, cost)
        };
        let retry = fits.max(lapse_ahead) - now;
        let queued = kind == TicketKind::Queue && (place.is_some() || ahead < MAX_WAITERS);
        Decision {
            queued,
            ..deny(
                limit,
                cost,
                retry,
                limit.saturating_sub(used),
                until(s.last_lapse()),
            )
        }
    }

    /// A denied take of `id` leaves a mark while `id` is held; one that waits its turn
    /// joins the queue, keeps its place, or (denied by another limit) leaves it.
    fn marks_denied(&self, s: &Holds, now: u64, member: &[u8]) -> bool {
        let (kind, _, id) = self.ticket(member);
        kind.waits() || s.live(s.at(now)).any(|h| h.cost > 0 && &*h.id == id)
    }

    /// A take: `admitted`, one more hold of its id (another of the same id counts on
    /// its own), and its waiter, if it waited, out of the queue; denied, a mark of the
    /// id that its release will give back while the id is held (a denied take takes no
    /// slot), and with a [`TicketKind::Queue`] ticket its place in the queue: joined
    /// or kept when this limit denied it, left when another did (or, its last try
    /// over, [`TicketKind::Last`]). `count_rejected` does not apply (`Limit` refuses
    /// it).
    fn commit(&self, s: &mut Holds, now: u64, cost: u64, admitted: bool, member: &[u8]) {
        if cost == 0 {
            return;
        }
        let now = s.at(now);
        s.clear_lapsed(now);
        let (kind, nonce, id) = self.ticket(member);
        if admitted {
            if kind.waits() {
                s.leave(nonce);
            }
            s.holds.push(Hold {
                id: id.into(),
                cost,
                lapse: now + self.lease,
            });
            s.newest = now;
            return;
        }
        s.newest = now;
        if kind.waits() {
            let own = self.check(s, now, cost, member);
            let place = s.place(now, nonce);
            match place {
                // Another limit denied it, or its last try is over: it leaves no
                // trace here.
                Some(_) if own.allowed() || kind == TicketKind::Last => {
                    s.leave(nonce);
                }
                Some(i) => s.waiters[i].lapse = self.waiter_lapse(now),
                None if own.queued => s.waiters.push(Hold {
                    id: nonce.into(),
                    cost,
                    lapse: self.waiter_lapse(now),
                }),
                None => {}
            }
            // A take asking again left its mark, if any, when it joined.
            if place.is_some() {
                return;
            }
        }
        if !s.live(now).any(|h| h.cost > 0 && &*h.id == id) {
            return;
        }
        if s.holds.iter().filter(|h| h.cost == 0).count() >= MAX_MARKS {
            let soonest = s.holds.iter().enumerate().filter(|(_, h)| h.cost == 0);
            if let Some((i, _)) = soonest.min_by_key(|(_, h)| h.lapse) {
                s.holds.remove(i);
            }
        }
        s.holds.push(Hold {
            id: id.into(),
            cost: 0,
            lapse: now + self.lease,
        });
    }

    /// A release: what one take of its id left is given back, a mark before a hold. A
    /// [`TicketKind::Leave`] takes its waiter out of the queue instead, and a
    /// [`TicketKind::GiveBack`] its waiter if it still waits, else its hold.
    fn refund(&self, s: &mut Holds, now: u64, _cost: u64, _at: u64, member: &[u8]) {
        let now = s.at(now);
        s.clear_lapsed(now);
        s.newest = now;
        let (kind, nonce, id) = self.ticket(member);
        match kind {
            TicketKind::Leave => {
                s.leave(nonce);
                return;
            }
            TicketKind::GiveBack if s.leave(nonce) => return,
            _ => {}
        }
        if let Some(i) = s.released(id) {
            s.holds.remove(i);
        }
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
