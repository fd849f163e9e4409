//! `concurrency` with `max_wait` on the memory store, with the manual clock: a take
//! that does not fit waits in the key's queue, first come first served; a newcomer
//! never passes the queue; a waiter that leaves, lapses or is denied by another limit
//! of its batch leaves no trace; the queue is bounded.

use std::time::Duration;

use spillway_core::algorithm::concurrency::{MAX_WAITERS, WAITER_GRACE};
use spillway_core::{
    Algorithm, Key, Limit, MemoryStore, Request, Store, Ticket, TicketKind, Timestamp,
};

const LEASE: Duration = Duration::from_secs(30);

fn waiting(n: u64, max_wait: Duration) -> Limit {
    Limit::builder(Algorithm::Concurrency, n, LEASE)
        .max_wait(max_wait)
        .build()
        .unwrap()
}

struct Queue {
    store: MemoryStore,
    key: Key,
    limit: Limit,
    now: Timestamp,
}

impl Queue {
    fn new(n: u64, max_wait: Duration) -> Queue {
        Queue {
            store: MemoryStore::new(),
            key: Key::new("tenant:a").unwrap(),
            limit: waiting(n, max_wait),
            now: Timestamp::from_secs(1_800_000_000),
        }
    }

    /// A take of the hold `id`, its ticket `kind` for the waiter `nonce`.
    fn take(&self, kind: TicketKind, nonce: u64, id: &str) -> spillway_core::Decision {
        let member = Ticket::new(kind, nonce).member(id.as_bytes());
        let request = Request::new(&self.key, &self.limit, 1).with_member(&member);
        self.store.decide_one(request, self.now).unwrap()
    }

    fn queue(&self, nonce: u64, id: &str) -> spillway_core::Decision {
        self.take(TicketKind::Queue, nonce, id)
    }

    fn release(&self, kind: TicketKind, nonce: u64, id: &str) {
        let member = Ticket::new(kind, nonce).member(id.as_bytes());
        let request = Request::release(&self.key, &self.limit, &member);
        self.store.decide_one(request, self.now).unwrap();
    }

    fn after(&mut self, d: Duration) {
        self.now = self.now.saturating_add(d);
    }
}

#[test]
fn waiters_are_admitted_first_come_first_served_as_holds_are_given_back() {
    let q = Queue::new(1, Duration::from_secs(1));
    assert!(q.queue(1, "a").allowed());
    // b, c and d wait, in that order.
    for (nonce, id) in [(2, "b"), (3, "c"), (4, "d")] {
        let d = q.queue(nonce, id);
        assert!(!d.allowed() && d.queued, "{id}: {d:?}");
    }
    // Asking again while nothing is given back keeps each one's place.
    assert!(q.queue(3, "c").queued);
    assert!(q.queue(2, "b").queued);
    q.release(TicketKind::Plain, 0, "a");
    // The freed slot is the head's: c, behind b, waits on; so does a newcomer, at the
    // end; a caller that cannot wait is refused, not queued.
    assert!(q.queue(3, "c").queued);
    let newcomer = q.queue(5, "e");
    assert!(!newcomer.allowed() && newcomer.queued);
    let plain = q.take(TicketKind::Plain, 6, "f");
    assert!(!plain.allowed() && !plain.queued);
    assert!(q.queue(2, "b").allowed(), "b is at the head");
    // b holds the slot now: c is the head, and waits for b's release.
    assert!(q.queue(3, "c").queued);
    q.release(TicketKind::Plain, 0, "b");
    assert!(!q.queue(4, "d").allowed());
    assert!(q.queue(3, "c").allowed());
    q.release(TicketKind::Plain, 0, "c");
    assert!(!q.queue(5, "e").allowed(), "d is ahead of e");
    assert!(q.queue(4, "d").allowed());
}

#[test]
fn a_waiter_that_leaves_or_lapses_leaves_no_trace() {
    let mut q = Queue::new(1, Duration::from_millis(500));
    assert!(q.queue(1, "a").allowed());
    assert!(q.queue(2, "b").queued);
    assert!(q.queue(3, "c").queued);
    assert!(q.queue(4, "d").queued);
    // b gives up and says so: c is the head.
    q.release(TicketKind::Leave, 2, "b");
    q.release(TicketKind::Plain, 0, "a");
    assert!(!q.queue(4, "d").allowed());
    // c stops asking (its replica died): its place lapses with max_wait (shorter than
    // the grace), and d, which asked meanwhile, is the head.
    q.after(Duration::from_millis(300));
    assert!(q.queue(4, "d").queued);
    q.after(Duration::from_millis(201));
    assert!(q.queue(4, "d").allowed());
    // A leave's hold is not touched: d's is still held.
    q.release(TicketKind::Leave, 4, "d");
    assert!(q.queue(5, "e").queued);
    // Cancelled while it waited: its waiter goes; once it holds: its hold goes.
    q.release(TicketKind::GiveBack, 5, "e");
    q.release(TicketKind::GiveBack, 4, "d");
    assert!(q.queue(6, "f").allowed());
}

#[test]
fn a_last_try_is_admitted_at_its_place_or_leaves_the_queue() {
    let q = Queue::new(1, Duration::from_secs(1));
    assert!(q.queue(1, "a").allowed());
    assert!(q.queue(2, "b").queued);
    assert!(q.queue(3, "c").queued);
    // c's wait is up: denied, not queued, and gone from the queue.
    let last = q.take(TicketKind::Last, 3, "c");
    assert!(!last.allowed() && !last.queued, "{last:?}");
    q.release(TicketKind::Plain, 0, "a");
    // b's wait is up too, but the slot is free and b is the head: admitted.
    assert!(q.take(TicketKind::Last, 2, "b").allowed());
    q.release(TicketKind::Plain, 0, "b");
    // Nobody waits: c's place is gone, and a newcomer goes at once.
    assert!(q.queue(4, "d").allowed());
}

#[test]
fn a_waiter_lapses_a_grace_after_it_last_asked_when_max_wait_is_longer() {
    let mut q = Queue::new(1, Duration::from_secs(60));
    assert!(q.queue(1, "a").allowed());
    assert!(q.queue(2, "b").queued);
    assert!(q.queue(3, "c").queued);
    q.release(TicketKind::Plain, 0, "a");
    // b asked last at 0; c keeps asking, behind b, until b's grace has passed.
    for _ in 0..3 {
        q.after(WAITER_GRACE / 4);
        assert!(q.queue(3, "c").queued);
    }
    q.after(WAITER_GRACE / 4 - Duration::from_micros(1));
    assert!(
        q.queue(3, "c").queued,
        "b's place is kept for the whole grace"
    );
    q.after(Duration::from_micros(1));
    assert!(q.queue(3, "c").allowed(), "b's place lapsed with the grace");
    // b, asking after its place lapsed, joins the end.
    let b = q.queue(2, "b");
    assert!(!b.allowed() && b.queued);
}

#[test]
fn a_take_another_limit_denies_leaves_the_queue() {
    let q = Queue::new(1, Duration::from_secs(1));
    let rate = Limit::new(Algorithm::FixedWindow, 1, Duration::from_secs(60)).unwrap();
    let rate_key = Key::new("rate").unwrap();
    assert!(q.queue(1, "a").allowed());
    assert!(q.queue(2, "b").queued);
    // The rate limit is spent by someone else.
    let spend = Request::new(&rate_key, &rate, 1);
    assert!(q.store.decide_one(spend, q.now).unwrap().allowed());
    q.release(TicketKind::Plain, 0, "a");
    // b's turn, but its batch is denied by the rate: it leaves the queue.
    let member = Ticket::new(TicketKind::Queue, 2).member(b"b");
    let batch = [
        Request::new(&q.key, &q.limit, 1).with_member(&member),
        Request::new(&rate_key, &rate, 1),
    ];
    let decided = futures_executor(q.store.check(&batch, q.now)).unwrap();
    assert_eq!(decided.denied_by, Some(1));
    assert!(decided.decisions[0].allowed() && !decided.decisions[0].queued);
    // c is admitted at once: nobody waits.
    assert!(q.queue(3, "c").allowed());
}

#[test]
fn the_queue_keeps_at_most_max_waiters() {
    let q = Queue::new(1, Duration::from_secs(1));
    assert!(q.queue(0, "a").allowed());
    for n in 1..=MAX_WAITERS as u64 {
        assert!(q.queue(n, "w").queued, "waiter {n}");
    }
    let past = q.queue(MAX_WAITERS as u64 + 1, "x");
    assert!(!past.allowed() && !past.queued);
    // A waiter already in the queue keeps its place.
    assert!(q.queue(MAX_WAITERS as u64, "w").queued);
}

fn futures_executor<T>(f: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// A member that is no ticket is a hold's id, whatever it looks like: the library's
/// and the tower layer's own ids (hex, `e…` included) take and give back plainly.
#[test]
fn an_id_that_is_no_ticket_takes_and_gives_back_plainly() {
    let q = Queue::new(1, Duration::from_secs(1));
    let id = b"e0123456789abcdef-1f";
    let take = Request::new(&q.key, &q.limit, 1).with_member(id);
    assert!(q.store.decide_one(take, q.now).unwrap().allowed());
    assert!(!q.store.decide_one(take, q.now).unwrap().allowed());
    // One release per take: the denied one's mark, then the hold.
    let release = Request::release(&q.key, &q.limit, id);
    q.store.decide_one(release, q.now).unwrap();
    assert!(!q.store.decide_one(take, q.now).unwrap().allowed());
    q.store.decide_one(release, q.now).unwrap();
    q.store.decide_one(release, q.now).unwrap();
    assert!(q.store.decide_one(take, q.now).unwrap().allowed());
}
