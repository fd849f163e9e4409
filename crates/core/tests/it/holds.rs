//! `concurrency` on the memory store, with the manual clock: holds taken up to the
//! limit, given back by id, renewed, lapsing at the end of their lease, a truthful
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

#[tokio::test]
async fn a_held_id_renews_and_never_counts_twice() {
    let (limiter, clock) = limiter();
    let (k, l) = (Key::new("tenant:a").unwrap(), holds(2));
    assert!(limiter.acquire(&k, &l, b"long", 1).await.unwrap().allowed());
    // A retried take of the same id is admitted and takes nothing more.
    let again = limiter.acquire(&k, &l, b"long", 1).await.unwrap();
    assert!(again.allowed());
    assert_eq!(again.remaining, 1);
    // Renewed just before it lapses, it outlives its first lease.
    clock.advance(LEASE - Duration::from_secs(1));
    assert!(limiter.acquire(&k, &l, b"long", 1).await.unwrap().allowed());
    clock.advance(Duration::from_secs(2));
    assert_eq!(limiter.peek_holds(&k, &l).await, 1);
    // Full, a held id still renews.
    assert!(
        limiter
            .acquire(&k, &l, b"other", 1)
            .await
            .unwrap()
            .allowed()
    );
    assert!(
        !limiter
            .acquire(&k, &l, b"third", 1)
            .await
            .unwrap()
            .allowed()
    );
    assert!(limiter.acquire(&k, &l, b"long", 1).await.unwrap().allowed());
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
    Release { id: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0u64..40_000_000).prop_map(Op::Advance),
        5 => (0u8..12, prop_oneof![4 => Just(1u64), 1 => 0u64..4])
            .prop_map(|(id, cost)| Op::Take { id, cost }),
        2 => (0u8..12).prop_map(|id| Op::Release { id }),
    ]
}

proptest! {
    /// Random takes, renewals, releases and lapses against a model kept from the
    /// decisions alone (an admitted take holds its slots until it is given back or
    /// its lease ends): the live slots never exceed the limit, and the store's
    /// `remaining` agrees with the model at every step.
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
        // id -> (slots, lapse µs)
        let mut model: HashMap<u8, (u64, u64)> = HashMap::new();
        for op in ops {
            let now = clock.now().as_micros();
            model.retain(|_, (_, lapse)| *lapse > now);
            let live = |m: &HashMap<u8, (u64, u64)>| m.values().map(|(c, _)| c).sum::<u64>();
            match op {
                Op::Advance(us) => clock.advance(Duration::from_micros(us)),
                Op::Take { id, cost } => {
                    let name = [b'h', id];
                    let d = rt.block_on(limiter.acquire(&k, &l, &name, cost)).unwrap();
                    let held = model.contains_key(&id);
                    if cost == 0 {
                        prop_assert!(d.allowed());
                    } else if cost > n {
                        prop_assert_eq!(d.outcome, Outcome::CostExceedsCapacity);
                    } else if held {
                        prop_assert!(d.allowed(), "a held id renews");
                        model.get_mut(&id).unwrap().1 = now + lease;
                    } else {
                        prop_assert_eq!(d.allowed(), live(&model) + cost <= n);
                        if d.allowed() {
                            model.insert(id, (cost, now + lease));
                        }
                    }
                    if d.allowed() {
                        prop_assert_eq!(d.remaining, n - live(&model));
                    }
                }
                Op::Release { id } => {
                    let d = rt.block_on(limiter.release(&k, &l, &[b'h', id])).unwrap();
                    model.remove(&id);
                    prop_assert_eq!(d.remaining, n - live(&model));
                }
            }
            prop_assert!(live(&model) <= n);
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
