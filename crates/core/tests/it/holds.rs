//! `concurrency` on the memory store, with the manual clock: holds taken up to the
//! limit, given back by id (a take of a held id is one more hold; a denied take's
//! release gives back its mark, not a hold), renewed by its own call, lapsing at the end of their lease, a truthful
//! `retry_after`, the `Hold` guard, bad input refused; and the promise under random
//! interleavings: never more than the limit live.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use spillway_core::{
    Algorithm, Clock, Error, Key, Limit, Limiter, ManualClock, MemoryStore, Outcome, Request,
    Store, Timestamp,
};

const LEASE: Duration = Duration::from_secs(30);

fn limiter() -> (Limiter<MemoryStore, ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(1_800_000_000));
    (
        Limiter::with_clock(MemoryStore::new(), clock.clone()),
        clock,
    )
}

fn holds(n: u64) -> Limit {
    Limit::new(Algorithm::Concurrency, n, LEASE).unwrap()
}

#[tokio::test]
async fn holds_are_taken_up_to_the_limit_and_given_back_by_id() {
    let (limiter, _) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(2));
    let take = |id: &'static str| limiter.acquire(&k, &l, id.as_bytes(), 1);
    assert_eq!(take("r1").await.unwrap().remaining, 1);
    assert_eq!(take("r2").await.unwrap().remaining, 0);
    let third = take("r3").await.unwrap();
    assert!(!third.allowed());
    // Nobody gives back: the first lapses at the end of its lease.
    assert_eq!(third.retry_after(), Some(LEASE));
    // Giving one back frees its slot at once; giving it back again changes nothing.
    assert_eq!(limiter.release(&k, &l, b"r1").await.unwrap().remaining, 1);
    assert_eq!(limiter.release(&k, &l, b"r1").await.unwrap().remaining, 1);
    assert!(take("r3").await.unwrap().allowed());
    assert!(!take("r4").await.unwrap().allowed());
    // Another key has its own slots.
    let other = Key::new("tenant:b").unwrap();
    assert!(
        limiter
            .acquire(&other, &l, b"r4", 1)
            .await
            .unwrap()
            .allowed()
    );
}

/// #60: an id a client chose named a hold already held, and the take was admitted as
/// a renewal whatever the others held: five takes of one id on a limit of 2 were all
/// admitted. A take of a held id is one more hold now; renewing is its own call.
#[tokio::test]
async fn a_held_id_is_one_more_hold_and_renewing_is_its_own_call() {
    let (limiter, clock) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(2));
    let takes: Vec<bool> = {
        let mut out = Vec::new();
        for _ in 0..5 {
            out.push(limiter.acquire(&k, &l, b"same", 1).await.unwrap().allowed());
        }
        out
    };
    assert_eq!(takes, [true, true, false, false, false]);
    assert_eq!(limiter.peek_holds(&k, &l).await, 2);
    // Five releases: three give back the marks of the denied takes, two the holds; a
    // release never gives back more than one take of the id left.
    for held in [2, 2, 2, 1, 0] {
        limiter.release(&k, &l, b"same").await.unwrap();
        assert_eq!(limiter.peek_holds(&k, &l).await, held);
    }

    // Renewed just before it lapses, a hold outlives its first lease.
    assert!(limiter.acquire(&k, &l, b"long", 1).await.unwrap().allowed());
    clock.advance(LEASE - Duration::from_secs(1));
    assert!(limiter.renew(&k, &l, b"long", 1).await.unwrap().allowed());
    clock.advance(Duration::from_secs(2));
    assert_eq!(limiter.peek_holds(&k, &l).await, 1);
    // Full, a held id still renews; a lapsed one is taken again only if it fits.
    assert!(
        limiter
            .acquire(&k, &l, b"other", 1)
            .await
            .unwrap()
            .allowed()
    );
    assert!(limiter.renew(&k, &l, b"long", 1).await.unwrap().allowed());
    assert!(!limiter.renew(&k, &l, b"third", 1).await.unwrap().allowed());
    assert_eq!(limiter.peek_holds(&k, &l).await, 2);
}

/// A denied take's release (Envoy sends one at stream end for a request it answered
/// 429) gives back the denied take's mark, never the hold of another request that
/// named the same id: in either order.
#[tokio::test]
async fn a_denied_takes_release_gives_back_its_mark_not_a_hold() {
    let (limiter, _) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(1));
    // The long request holds; a short one with its id is denied and released.
    assert!(limiter.acquire(&k, &l, b"x", 1).await.unwrap().allowed());
    assert!(!limiter.acquire(&k, &l, b"x", 1).await.unwrap().allowed());
    limiter.release(&k, &l, b"x").await.unwrap();
    assert_eq!(
        limiter.peek_holds(&k, &l).await,
        1,
        "the long one still holds"
    );
    // With room, a second request naming x holds a slot of its own; its release
    // leaves the long one's.
    let (k, l) = (Key::new("tenant:b").unwrap(), holds(2));
    assert!(limiter.acquire(&k, &l, b"x", 1).await.unwrap().allowed());
    assert!(limiter.acquire(&k, &l, b"x", 1).await.unwrap().allowed());
    limiter.release(&k, &l, b"x").await.unwrap();
    assert_eq!(
        limiter.peek_holds(&k, &l).await,
        1,
        "the long one still holds"
    );
    // A denied take of an id nobody holds leaves nothing: unique ids cost no mark.
    assert!(limiter.acquire(&k, &l, b"y", 1).await.unwrap().allowed());
    assert!(!limiter.acquire(&k, &l, b"z", 1).await.unwrap().allowed());
    limiter.release(&k, &l, b"y").await.unwrap();
    limiter.release(&k, &l, b"x").await.unwrap();
    assert_eq!(limiter.peek_holds(&k, &l).await, 0);
}

#[tokio::test]
async fn a_hold_lapses_at_the_end_of_its_lease_not_before() {
    let (limiter, clock) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(1));
    assert!(
        limiter
            .acquire(&k, &l, b"crashed", 1)
            .await
            .unwrap()
            .allowed()
    );
    clock.advance(LEASE - Duration::from_micros(1));
    let denied = limiter.acquire(&k, &l, b"next", 1).await.unwrap();
    assert_eq!(denied.retry_after(), Some(Duration::from_micros(1)));
    clock.advance(Duration::from_micros(1));
    assert!(limiter.acquire(&k, &l, b"next", 1).await.unwrap().allowed());
}

#[tokio::test]
async fn a_cost_takes_that_many_slots_and_retry_after_waits_for_enough_to_lapse() {
    let (limiter, clock) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(5));
    assert!(limiter.acquire(&k, &l, b"a", 2).await.unwrap().allowed());
    clock.advance(Duration::from_secs(10));
    assert!(limiter.acquire(&k, &l, b"b", 2).await.unwrap().allowed());
    // 4 of 5 taken: 3 more fit once `a` lapses, in 20 s.
    let d = limiter.acquire(&k, &l, b"c", 3).await.unwrap();
    assert_eq!(d.retry_after(), Some(Duration::from_secs(20)));
    let one = limiter.acquire(&k, &l, b"d", 1).await.unwrap();
    assert_eq!(one.remaining, 0);
    // 5 of 5: once `a` lapses 2 remain taken, so 3 more wait for `b` and `d` too.
    let d = limiter.acquire(&k, &l, b"c", 3).await.unwrap();
    assert_eq!(d.retry_after(), Some(LEASE));
    assert_eq!(
        limiter.acquire(&k, &l, b"e", 6).await.unwrap().outcome,
        Outcome::CostExceedsCapacity
    );
    clock.advance(LEASE);
    // `a` and `b` lapsed; `d` (taken 10 s in) too.
    assert!(limiter.acquire(&k, &l, b"c", 3).await.unwrap().allowed());
}

#[tokio::test]
async fn a_clock_that_steps_back_neither_revives_nor_shortens_a_hold() {
    let (limiter, clock) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(1));
    assert!(limiter.acquire(&k, &l, b"a", 1).await.unwrap().allowed());
    clock.advance(LEASE);
    assert!(limiter.acquire(&k, &l, b"b", 1).await.unwrap().allowed());
    clock.set(clock.now().saturating_sub(LEASE));
    // `a` stays lapsed, `b` stays held.
    assert!(!limiter.acquire(&k, &l, b"a", 1).await.unwrap().allowed());
}

#[tokio::test]
async fn the_guard_gives_its_hold_back_when_dropped_or_released() {
    let (limiter, _) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(1));
    let (d, hold) = limiter.hold(&k, &l, 1).await.unwrap();
    assert!(d.allowed());
    let hold = hold.expect("admitted");
    let (d, none) = limiter.hold(&k, &l, 1).await.unwrap();
    assert!(!d.allowed() && none.is_none());
    assert!(hold.renew().await.unwrap().allowed());
    drop(hold);
    // The memory store gave it back in the drop (the runtime's task, at once here).
    tokio::task::yield_now().await;
    let (_, hold) = limiter.hold(&k, &l, 1).await.unwrap();
    let hold = hold.expect("the dropped hold was given back");
    assert_eq!(hold.release().await.unwrap().remaining, 1);
    // Without a runtime, a local store is given back in the drop itself.
    let (_, hold) = limiter.hold(&k, &l, 1).await.unwrap();
    std::thread::spawn(move || drop(hold)).join().unwrap();
    assert_eq!(limiter.peek_holds(&k, &l).await, 0);
}

/// `Hold::keep_renewed`: a hold renewed every half lease by a task outlives three
/// leases (tokio's paused time and the manual clock advanced together) until released
/// or dropped; without the renewal it lapses at 30 s and the second take is admitted.
#[tokio::test(start_paused = true)]
async fn a_hold_kept_renewed_outlives_its_lease_until_released_or_dropped() {
    let (limiter, clock) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(1));
    let pass = async |seconds: u64| {
        for _ in 0..seconds {
            clock.advance(Duration::from_secs(1));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let (_, hold) = limiter.hold(&k, &l, 1).await.unwrap();
    let hold = hold.expect("admitted").keep_renewed();
    pass(95).await;
    let (d, none) = limiter.hold(&k, &l, 1).await.unwrap();
    assert!(!d.allowed() && none.is_none(), "renewed past three leases");
    assert_eq!(hold.release().await.unwrap().remaining, 1);

    let (_, hold) = limiter.hold(&k, &l, 1).await.unwrap();
    let hold = hold.expect("given back by the release").keep_renewed();
    pass(45).await;
    assert_eq!(
        limiter.peek_holds(&k, &l).await,
        1,
        "renewed past its lease"
    );
    drop(hold);
    assert_eq!(
        limiter.peek_holds(&k, &l).await,
        0,
        "given back in the drop"
    );
    pass(45).await;
    assert_eq!(limiter.peek_holds(&k, &l).await, 0, "never renewed after");
}

#[tokio::test]
async fn bad_holds_are_refused_before_the_store() {
    let (limiter, _) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(3));
    let refused = |e: Error| e.to_string();
    let no_id = limiter.check_n(&k, &l, 1).await.unwrap_err();
    assert!(refused(no_id).contains("needs the id of the hold"));
    let empty = limiter.acquire(&k, &l, b"", 1).await.unwrap_err();
    assert!(refused(empty).contains("is empty"));
    let usage = limiter.charge_usage(&k, &l, 1).await.unwrap_err();
    assert!(refused(usage).contains("counts holds"));
    let long = vec![b'x'; 1025];
    assert!(limiter.acquire(&k, &l, &long, 1).await.is_err());
    assert!(
        Limit::new(Algorithm::Concurrency, 1_001, LEASE)
            .unwrap_err()
            .to_string()
            .contains("1000 holds")
    );
    assert!(
        Limit::builder(Algorithm::Concurrency, 3, LEASE)
            .count_rejected(true)
            .build()
            .is_err()
    );
    assert_eq!(limiter.peek_holds(&k, &l).await, 0);
}

#[test]
fn a_concurrency_limit_says_what_it_is() {
    assert_eq!(holds(10).to_string(), "10 at once (concurrency, lease 30s)");
    assert!(Algorithm::Concurrency.is_exact());
    assert_eq!(
        "concurrency".parse::<Algorithm>().unwrap(),
        Algorithm::Concurrency
    );
}

/// Slots taken now, read through a look.
trait PeekHolds {
    async fn peek_holds(&self, k: &Key, l: &Limit) -> u64;
}

impl<S: Store, C: Clock> PeekHolds for Limiter<S, C> {
    async fn peek_holds(&self, k: &Key, l: &Limit) -> u64 {
        let look = self.acquire(k, l, b"look", 0).await.unwrap();
        l.limit() - look.remaining
    }
}

/// One step of a random interleaving.
#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Take { id: u8, cost: u64 },
    Renew { id: u8, cost: u64 },
    Release { id: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    let cost = || prop_oneof![4 => Just(1u64), 1 => 0u64..4];
    prop_oneof![
        2 => (0u64..40_000_000).prop_map(Op::Advance),
        5 => (0u8..6, cost()).prop_map(|(id, cost)| Op::Take { id, cost }),
        1 => (0u8..6, cost()).prop_map(|(id, cost)| Op::Renew { id, cost }),
        3 => (0u8..6).prop_map(|id| Op::Release { id }),
    ]
}

/// One id's live holds (slots, lapse µs) and marks (lapse µs).
type OfId = (Vec<(u64, u64)>, Vec<u64>);

/// The model: per id, its holds and marks.
#[derive(Default)]
struct Model(HashMap<u8, OfId>);

impl Model {
    fn live(&self) -> u64 {
        self.0.values().flat_map(|(h, _)| h).map(|(c, _)| c).sum()
    }

    fn lapse(&mut self, now: u64) {
        for (holds, marks) in self.0.values_mut() {
            holds.retain(|&(_, lapse)| lapse > now);
            marks.retain(|&lapse| lapse > now);
        }
    }

    /// A release: a mark of `id` first (the soonest to lapse), else its hold soonest
    /// to lapse.
    fn release(&mut self, id: u8) {
        let (holds, marks) = self.0.entry(id).or_default();
        let soonest = |v: &[u64]| (0..v.len()).min_by_key(|&i| v[i]);
        if let Some(i) = soonest(marks) {
            marks.remove(i);
        } else if let Some(i) = soonest(&holds.iter().map(|h| h.1).collect::<Vec<_>>()) {
            holds.remove(i);
        }
    }
}

proptest! {
    /// Random takes (several of one id), renewals, releases and lapses against a
    /// model kept from the decisions alone (an admitted take holds its slots until a
    /// release or its lease ends, a denied one of a held id leaves a mark its release
    /// gives back):
    /// the live slots never exceed the limit, and the store's `remaining` agrees with
    /// the model at every step.
    #[test]
    fn never_more_than_the_limit_live(
        n in 1u64..6,
        lease in prop::sample::select(vec![1_000_000u64, 10_000_000, 30_000_000]),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (limiter, clock) = limiter();
        let (k, l) = (
            Key::new("tenant").unwrap(),
            Limit::new(Algorithm::Concurrency, n, Duration::from_micros(lease)).unwrap(),
        );
        let mut model = Model::default();
        for op in ops {
            let now = clock.now().as_micros();
            model.lapse(now);
            match op {
                Op::Advance(us) => clock.advance(Duration::from_micros(us)),
                Op::Take { id, cost } | Op::Renew { id, cost } => {
                    let name = [b'h', id];
                    let renew = matches!(op, Op::Renew { .. });
                    let d = if renew {
                        rt.block_on(limiter.renew(&k, &l, &name, cost)).unwrap()
                    } else {
                        rt.block_on(limiter.acquire(&k, &l, &name, cost)).unwrap()
                    };
                    let fits = model.live() + cost <= n;
                    let (holds, marks) = model.0.entry(id).or_default();
                    let held = holds.iter_mut().min_by_key(|h| h.1);
                    if renew && cost > 0 && held.is_some() {
                        prop_assert!(d.allowed(), "a held id renews");
                        let h = held.unwrap();
                        h.1 = h.1.max(now + lease);
                    } else if cost == 0 {
                        prop_assert!(d.allowed());
                    } else {
                        if cost > n {
                            prop_assert_eq!(d.outcome, Outcome::CostExceedsCapacity);
                        } else {
                            prop_assert_eq!(d.allowed(), fits, "{:?}", op);
                        }
                        if d.allowed() {
                            holds.push((cost, now + lease));
                        } else if !renew && !holds.is_empty() {
                            // A denied take of a held id leaves a mark.
                            marks.push(now + lease);
                        }
                    }
                    if d.allowed() {
                        prop_assert_eq!(d.remaining, n - model.live());
                    }
                }
                Op::Release { id } => {
                    let d = rt.block_on(limiter.release(&k, &l, &[b'h', id])).unwrap();
                    model.release(id);
                    prop_assert_eq!(d.remaining, n - model.live());
                }
            }
            prop_assert!(model.live() <= n);
        }
    }
}

#[tokio::test]
async fn a_batch_takes_a_hold_with_its_rate_limits_all_or_nothing() {
    let (limiter, _) = limiter();
    let k = Key::new("tenant:a").unwrap();
    let (l, per_minute) = (
        holds(5),
        Limit::new(Algorithm::FixedWindow, 1, Duration::from_secs(60)).unwrap(),
    );
    let both = |id: &'static [u8]| {
        [
            Request::new(&k, &l, 1).with_member(id),
            Request::new(&k, &per_minute, 1),
        ]
    };
    assert!(limiter.check_all(&both(b"a")).await.unwrap().allowed());
    // The rate limit denies the second: it takes no hold.
    assert!(!limiter.check_all(&both(b"b")).await.unwrap().allowed());
    assert_eq!(limiter.peek_holds(&k, &l).await, 1);
}
