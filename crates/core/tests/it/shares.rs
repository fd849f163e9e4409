//! Shares that borrow (`shares`): a parent's rate over children with guarantees,
//! ceilings, weights and priorities, decided on one tree state. Each test drives the
//! algorithm in 1 ms steps on a manual timeline and checks one promise of
//! docs/algorithms.md; the property test (proptests.rs) checks them against a model
//! and the Redis differential test holds the script to the same decisions.

use std::collections::HashMap;
use std::time::Duration;

use spillway_core::algorithm::shares::{self, Path, Share, Shares};
use spillway_core::{
    Algorithm, Key, Limit, Limiter, ManualClock, MemoryStore, Outcome, State, Timestamp,
};

const T0: u64 = 1_700_000_000_000_000;
const MS: u64 = 1_000;

fn tree(limit: u64, burst: u64, wait_ms: u64, shares: Shares) -> Limit {
    Limit::builder(Algorithm::Shares, limit, Duration::from_secs(1))
        .burst(burst)
        .max_wait(Duration::from_millis(wait_ms))
        .shares(shares)
        .build()
        .unwrap()
}

/// A timeline: who asks how often, and what each was given, by the time it goes ahead.
struct Run {
    limit: Limit,
    state: State,
    now: u64,
    /// Per child: admissions (at the time each goes ahead) and refusals.
    went: HashMap<String, Vec<u64>>,
    refused: HashMap<String, u64>,
    waits: Vec<u64>,
}

impl Run {
    fn new(limit: Limit) -> Run {
        Run {
            limit,
            state: State::new(),
            now: T0,
            went: HashMap::new(),
            refused: HashMap::new(),
            waits: Vec::new(),
        }
    }

    fn ask(&mut self, child: &str, level: u8) -> spillway_core::Decision {
        let member = shares::member(child, level);
        let (d, _) = self.limit.decide(
            &mut self.state,
            Timestamp::from_micros(self.now),
            1,
            &member,
        );
        if d.allowed() {
            let wait = d.wait.as_micros() as u64;
            self.waits.push(wait);
            self.went
                .entry(child.into())
                .or_default()
                .push(self.now + wait);
        } else {
            *self.refused.entry(child.into()).or_default() += 1;
        }
        d
    }

    /// `ms` milliseconds; each `(child, level, per_ms)` asks `per_ms` times a ms (a
    /// flood), or once every `-per_ms` ms when negative (a light sender).
    fn run(&mut self, ms: u64, who: &[(&str, u8, i64)]) {
        for step in 0..ms {
            for &(child, level, per_ms) in who {
                let times = if per_ms > 0 {
                    per_ms as u64
                } else {
                    u64::from(step % (-per_ms) as u64 == 0)
                };
                for _ in 0..times {
                    self.ask(child, level);
                }
            }
            self.now += MS;
        }
    }

    /// Admissions of `child` that go ahead in [from, to) (µs after T0).
    fn went_between(&self, child: &str, from: u64, to: u64) -> usize {
        self.went.get(child).map_or(0, |v| {
            v.iter().filter(|&&t| t >= T0 + from && t < T0 + to).count()
        })
    }

    /// The most that go ahead, all children together, in any window of `len` µs.
    fn most_in_any(&self, len: u64) -> usize {
        let mut all: Vec<u64> = self.went.values().flatten().copied().collect();
        all.sort_unstable();
        let mut most = 0;
        let mut start = 0;
        for end in 0..all.len() {
            while all[end] - all[start] >= len {
                start += 1;
            }
            most = most.max(end - start + 1);
        }
        most
    }
}

/// A guarantee holds while borrowers flood the parent: A asks at its guaranteed 30 a
/// second and is never refused while B floods; B borrows the rest, and together they
/// never exceed the parent's burst plus its rate in any second.
#[test]
fn a_guarantee_holds_while_a_sibling_floods_and_the_parent_holds_its_rate() {
    let limit = tree(
        100,
        100,
        0,
        Shares::new()
            .child("a", Share::new(30, 100))
            .child("b", Share::new(20, 100)),
    );
    let mut run = Run::new(limit);
    // A every 34 ms (29.4 a second), B five a ms.
    run.run(10_000, &[("a", 0, -34), ("b", 0, 5)]);
    assert_eq!(run.refused.get("a"), None, "a guarantee was refused");
    let a = run.went_between("a", 0, 10_000 * MS);
    assert!(a >= 290, "{a}");
    // The parent's TAT fills its burst over the first seconds (B's ceiling paces
    // it): 130 a second. Then the parent's rate, 100 a second between them.
    let both = run.went_between("a", 4_000 * MS, 10_000 * MS)
        + run.went_between("b", 4_000 * MS, 10_000 * MS);
    assert!((595..=605).contains(&both), "{both} in 6 s");
    assert!(
        run.most_in_any(1_000 * MS) <= 200,
        "{}",
        run.most_in_any(1_000 * MS)
    );
}

/// Borrowed capacity is shared by weight: two floods of weights 1 and 3, no
/// guarantees, get a quarter and three quarters of the parent.
#[test]
fn borrowers_share_by_weight() {
    let limit = tree(
        200,
        200,
        0,
        Shares::new()
            .child("light", Share::new(0, 200).weight(1))
            .child("heavy", Share::new(0, 200).weight(3)),
    );
    let mut run = Run::new(limit);
    run.run(12_000, &[("light", 0, 3), ("heavy", 0, 3)]);
    // Past the first seconds (the parent's TAT filling its burst), steady.
    let light = run.went_between("light", 4_000 * MS, 12_000 * MS) as f64;
    let heavy = run.went_between("heavy", 4_000 * MS, 12_000 * MS) as f64;
    let share = light / (light + heavy);
    assert!(
        (0.24..=0.26).contains(&share),
        "light {light}, heavy {heavy}"
    );
    assert!((light + heavy - 1_600.0).abs() <= 5.0, "{}", light + heavy);
}

/// Equal weights, equal floods: Jain's fairness index per second is at least 0.95.
#[test]
fn equal_borrowers_are_treated_equally_each_second() {
    let limit = tree(
        200,
        200,
        0,
        Shares::new()
            .child("x", Share::new(20, 200))
            .child("y", Share::new(20, 200))
            .child("z", Share::new(20, 200)),
    );
    let mut run = Run::new(limit);
    // z asks twice as hard: asking more buys no more than its share.
    run.run(10_000, &[("x", 0, 2), ("y", 0, 2), ("z", 0, 4)]);
    for second in 2..10 {
        let got: Vec<f64> = ["x", "y", "z"]
            .iter()
            .map(|c| run.went_between(c, second * 1_000 * MS, (second + 1) * 1_000 * MS) as f64)
            .collect();
        let sum: f64 = got.iter().sum();
        let squares: f64 = got.iter().map(|g| g * g).sum();
        let jain = sum * sum / (3.0 * squares);
        assert!(jain >= 0.95, "second {second}: {got:?}, Jain {jain:.3}");
    }
}

/// A ceiling caps a lone borrower; without one the lone borrower takes the whole
/// parent (work conserving).
#[test]
fn a_lone_borrower_reaches_its_ceiling_and_no_further() {
    let limit = tree(
        100,
        100,
        0,
        Shares::new()
            .child("capped", Share::new(10, 40))
            .child("free", Share::new(10, 100)),
    );
    let mut run = Run::new(limit.clone());
    run.run(5_000, &[("capped", 0, 3)]);
    let capped = run.went_between("capped", 1_000 * MS, 5_000 * MS);
    assert!(
        (158..=162).contains(&capped),
        "{capped} in 4 s at a ceiling of 40"
    );
    let mut run = Run::new(limit);
    run.run(5_000, &[("free", 0, 3)]);
    let free = run.went_between("free", 1_000 * MS, 5_000 * MS);
    assert!(
        (398..=402).contains(&free),
        "{free} in 4 s of a parent of 100"
    );
}

/// Priorities: under a saturated parent the lower priority is shed first; when the
/// higher one stops, the lower gets the whole parent back at once.
#[test]
fn the_lowest_priority_is_shed_first_and_gets_everything_back_when_alone() {
    let limit = tree(
        100,
        100,
        0,
        Shares::new()
            .child("web", Share::new(0, 100))
            .child("batch", Share::new(0, 100))
            .priorities(2, 200),
    );
    let mut run = Run::new(limit);
    run.run(5_000, &[("web", 0, 2), ("batch", 1, 2)]);
    let web = run.went_between("web", 1_000 * MS, 5_000 * MS);
    let batch = run.went_between("batch", 1_000 * MS, 5_000 * MS);
    assert!(web >= 395, "web {web}, batch {batch}");
    assert!(batch <= 5, "web {web}, batch {batch}");
    run.run(3_000, &[("batch", 1, 2)]);
    let alone = run.went_between("batch", 6_000 * MS, 8_000 * MS);
    assert!((198..=202).contains(&alone), "{alone} in 2 s alone");
}

/// Borrowers wait up to `max_wait` rather than be refused; a wait never passes it,
/// and what goes ahead still keeps to the parent's rate at the times it goes.
#[test]
fn borrowers_wait_for_the_parent_up_to_max_wait() {
    let limit = tree(
        100,
        50,
        200,
        Shares::new().child("a", Share::new(10, 100).burst(2)),
    );
    let mut run = Run::new(limit);
    run.run(3_000, &[("a", 0, 1)]);
    let longest = run.waits.iter().max().copied().unwrap_or(0);
    assert!(longest > 150 * MS && longest <= 200 * MS, "{longest}");
    assert!(
        run.most_in_any(1_000 * MS) <= 150,
        "{}",
        run.most_in_any(1_000 * MS)
    );
    // A thousand asked; about 100 a second plus the burst went: the rest refused.
    assert!(run.refused["a"] > 2_000, "{:?}", run.refused);
}

/// What a request learns: its decision says the child's burst as its limit, and the
/// path says how it was (or would be) admitted.
#[test]
fn a_decision_and_its_path() {
    let limit = tree(
        10,
        10,
        0,
        Shares::new().child("a", Share::new(2, 5).burst(2)),
    );
    let mut state = State::new();
    let now = Timestamp::from_micros(T0);
    let a = shares::member("a", 0);
    let first = limit.share_path(&state, now, 1, &a);
    assert_eq!(first, Some(Path::Guaranteed));
    let (d, _) = limit.decide(&mut state, now, 1, &a);
    assert_eq!(
        (d.outcome, d.limit, d.borrowed),
        (Outcome::Allowed, 2, false)
    );
    limit.decide(&mut state, now, 1, &a);
    // Its guaranteed burst spent, and the ceiling's with it (a guaranteed request moves
    // the ceiling too): 200 ms later the ceiling (5 a second) has room for one.
    assert!(matches!(
        limit.share_path(&state, now, 1, &a),
        Some(Path::Denied { .. })
    ));
    let now = Timestamp::from_micros(T0 + 200 * MS);
    assert_eq!(
        limit.share_path(&state, now, 1, &a),
        Some(Path::Borrowed {
            wait: 0,
            fair: true
        })
    );
    let (d, _) = limit.decide(&mut state, now, 1, &a);
    assert!(d.allowed() && d.borrowed, "{d:?}");
    let (d, _) = limit.decide(&mut state, now, 1, &a);
    assert!(!d.allowed() && !d.borrowed, "{d:?}");
    assert_eq!(
        limit.decide(&mut state, now, 3, &a).0.outcome,
        Outcome::CostExceedsCapacity
    );
    // An unlisted child is `*`: no guarantee, borrowing up to the parent.
    let other = shares::member("zed", 0);
    assert!(matches!(
        limit.share_path(&state, now, 1, &other),
        Some(Path::Borrowed { .. })
    ));
}

/// Trees that cannot keep their promises are refused, saying why.
#[test]
fn invalid_trees_say_why() {
    let err = |s: Shares, burst: u64, wait: u64| {
        Limit::builder(Algorithm::Shares, 100, Duration::from_secs(1))
            .burst(burst)
            .max_wait(Duration::from_millis(wait))
            .shares(s)
            .build()
            .unwrap_err()
            .to_string()
    };
    let two = Shares::new()
        .child("a", Share::new(60, 100))
        .child("b", Share::new(50, 100));
    assert!(err(two, 100, 0).contains("add up to 110"));
    assert!(err(Shares::new().child("a", Share::new(60, 50)), 100, 0).contains("below its rate"));
    assert!(err(Shares::new().child("a", Share::new(6, 500)), 100, 0).contains("above the parent"));
    assert!(
        err(
            Shares::new().child("a", Share::new(6, 50).weight(0)),
            100,
            0
        )
        .contains("weight 0")
    );
    assert!(
        err(
            Shares::new()
                .child("a", Share::new(6, 50))
                .priorities(4, 300),
            100,
            0
        )
        .contains("reserve 0.3")
    );
    // A burst of 10 is 100 ms; a wait of 100 ms leaves borrowers nothing.
    assert!(err(Shares::new(), 10, 100).contains("leaves borrowers too little"));
    let twice = Shares::new()
        .child("a", Share::new(1, 50))
        .child("a", Share::new(1, 50));
    assert!(err(twice, 100, 0).contains("listed twice"));
    let gcra = Limit::builder(Algorithm::Gcra, 10, Duration::from_secs(1))
        .shares(Shares::new().child("a", Share::new(1, 5)))
        .build()
        .unwrap_err();
    assert!(gcra.to_string().contains("apply to shares"), "{gcra}");
}

/// Through a store: the member is required and checked; decisions as above.
#[tokio::test]
async fn a_store_decides_shares_and_refuses_a_request_without_its_child() {
    let limit = tree(10, 10, 0, Shares::new().child("a", Share::new(5, 10)));
    let clock = ManualClock::new(Timestamp::from_micros(T0));
    let limiter = Limiter::with_clock(MemoryStore::new(), clock);
    let key = Key::new("org:1").unwrap();
    let d = limiter
        .check_share(&key, &limit, &shares::member("a", 0), 1)
        .await
        .unwrap();
    assert!(d.allowed());
    let err = limiter.check(&key, &limit).await.unwrap_err();
    assert!(err.to_string().contains("needs a member"), "{err}");
    let err = limiter
        .check_share(&key, &limit, b"a", 1)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("priority (one digit)"), "{err}");
}
