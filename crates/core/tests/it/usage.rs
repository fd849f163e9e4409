//! Usage charged after the fact (`Request::usage`, `Limiter::charge_usage`): charged in
//! full, into debt, against a reference model of each algorithm written from its
//! definition (not from the algorithm's code): a counter per window, a level that refills
//! continuously, a theoretical arrival time, a log of every charge. Random sequences of
//! usages and looks on a manual clock must give the model's decisions, and nothing
//! charged may leak.

use std::time::Duration;

use proptest::prelude::*;
use spillway_core::{
    Algorithm, Edge, Key, Limit, Limiter, ManualClock, MemoryStore, Outcome, Request, Store,
    Timestamp,
};

const START: u64 = 1_702_080_000_000_000;

/// One step: advance the clock, then report `usage` units (or only look, with `None`).
#[derive(Clone, Debug)]
struct Step {
    advance: u64,
    usage: Option<u64>,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let advance = prop_oneof![3 => Just(0u64), 5 => 0u64..300_000, 2 => 0u64..4_000_000];
    let usage = prop_oneof![2 => Just(None), 5 => (1u64..40).prop_map(Some), 1 => (40u64..400).prop_map(Some)];
    prop::collection::vec(
        (advance, usage).prop_map(|(advance, usage)| Step { advance, usage }),
        1..60,
    )
}

/// What each algorithm promises, from its definition, in exact integers.
#[derive(Clone)]
enum Model {
    /// The units charged in the window holding `at`, of `window` µs.
    FixedWindow { window: u64, start: u64, count: u64 },
    /// Scaled units at `at` (one token is `unit`, `rate` gained per µs, at most `full`).
    TokenBucket {
        rate: i128,
        unit: i128,
        full: i128,
        level: i128,
        at: u64,
    },
    /// The theoretical arrival time; a unit's emission is `unit / rate` µs, rounded up.
    Gcra {
        rate: u64,
        unit: u64,
        tolerance: u64,
        tat: u64,
    },
    /// Every charge, (time, units).
    SlidingLog { window: u64, log: Vec<(u64, u64)> },
}

impl Model {
    fn new(limit: &Limit) -> Model {
        let (rate, unit) = limit.scaled_rate();
        match limit.algorithm() {
            Algorithm::FixedWindow => Model::FixedWindow {
                window: limit.window_micros(),
                start: 0,
                count: 0,
            },
            Algorithm::TokenBucket => Model::TokenBucket {
                rate: rate.into(),
                unit: unit.into(),
                full: i128::from(limit.burst() * unit),
                level: i128::from(limit.burst() * unit),
                at: 0,
            },
            Algorithm::Gcra => Model::Gcra {
                rate,
                unit,
                tolerance: (limit.burst() * unit).div_ceil(rate),
                tat: 0,
            },
            Algorithm::SlidingLog => Model::SlidingLog {
                window: limit.window_micros(),
                log: Vec::new(),
            },
            other => unreachable!("no model for {other}"),
        }
    }

    /// Brings the model to `now`.
    fn advance(&mut self, now: u64) {
        match self {
            Model::FixedWindow {
                window,
                start,
                count,
            } => {
                let s = now - now % *window;
                if s != *start {
                    (*start, *count) = (s, 0);
                }
            }
            Model::TokenBucket {
                rate,
                full,
                level,
                at,
                ..
            } => {
                if *at != 0 {
                    *level = (*level + i128::from(now - *at) * *rate).min(*full);
                }
                *at = now;
            }
            Model::Gcra { .. } => {}
            Model::SlidingLog { window, log } => log.retain(|&(t, _)| t + *window > now),
        }
    }

    fn charge(&mut self, now: u64, units: u64) {
        match self {
            Model::FixedWindow { count, .. } => *count += units,
            Model::TokenBucket { unit, level, .. } => *level -= i128::from(units) * *unit,
            Model::Gcra {
                rate, unit, tat, ..
            } => {
                *tat = (*tat).max(now) + (units * *unit).div_ceil(*rate);
            }
            Model::SlidingLog { log, .. } => log.push((now, units)),
        }
    }

    /// Whether a look (cost 0) is admitted: nothing owed.
    fn admits_a_look(&self, now: u64, capacity: u64) -> bool {
        match self {
            Model::FixedWindow { count, .. } => *count <= capacity,
            Model::TokenBucket { level, .. } => *level >= 0,
            Model::Gcra { tolerance, tat, .. } => (*tat).max(now) - now <= *tolerance,
            Model::SlidingLog { log, .. } => log.iter().map(|e| e.1).sum::<u64>() <= capacity,
        }
    }
}

fn limits() -> Vec<Limit> {
    let s = Duration::from_secs(1);
    vec![
        Limit::new(Algorithm::FixedWindow, 100, s * 2).unwrap(),
        Limit::builder(Algorithm::TokenBucket, 50, s)
            .burst(120)
            .build()
            .unwrap(),
        // A rate whose units do not divide: the debt's leftover is kept exactly.
        Limit::builder(Algorithm::TokenBucket, 7, s * 3)
            .burst(30)
            .build()
            .unwrap(),
        Limit::builder(Algorithm::Gcra, 50, s)
            .burst(120)
            .build()
            .unwrap(),
        Limit::new(Algorithm::SlidingLog, 100, s * 2).unwrap(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Usage is charged in full and a look is admitted exactly when the model owes
    /// nothing, for every algorithm with a model; the sliding log may fold charges made
    /// while in debt (moving them later), so it is held to "never admits what the model
    /// denies" and, until it first folds, to the model exactly.
    #[test]
    fn usage_goes_into_debt_exactly_as_the_model_says(steps in steps()) {
        for limit in limits() {
            let store = MemoryStore::new();
            let key = Key::new("tenant").unwrap();
            let mut model = Model::new(&limit);
            let mut now = START;
            let mut folded = false;
            for step in &steps {
                now += step.advance;
                model.advance(now);
                let at = Timestamp::from_micros(now);
                let decision = match step.usage {
                    Some(units) => {
                        if !model.admits_a_look(now, limit.capacity()) {
                            folded = true;
                        }
                        model.charge(now, units);
                        store.decide_one(Request::usage(&key, &limit, units), at).unwrap()
                    }
                    None => store.decide_one(Request::new(&key, &limit, 0), at).unwrap(),
                };
                let expected = model.admits_a_look(now, limit.capacity());
                let is_log = limit.algorithm() == Algorithm::SlidingLog;
                if !is_log || !folded {
                    prop_assert_eq!(decision.allowed(), expected, "{} at +{}µs: {:?}", limit, now - START, decision);
                } else if !expected {
                    prop_assert!(!decision.allowed(), "{} leaked at +{}µs", limit, now - START);
                }
                if let Outcome::Denied { retry_after } = decision.outcome {
                    // Denied now, admitted once `retry_after` has passed (the model agrees).
                    let mut later = model.clone();
                    let then = now + retry_after.as_micros() as u64;
                    later.advance(then);
                    let admitted = later.admits_a_look(then, limit.capacity());
                    if !is_log || !folded {
                        prop_assert!(admitted, "{}: still owed after retry_after {:?}", limit, retry_after);
                    }
                }
            }
        }
    }
}

/// The example: a budget of 1,000 tokens a minute, a request checked with a
/// look and its response's 600 tokens charged after it. The second response drives the
/// budget into debt; the third request is refused, whatever the algorithm.
#[tokio::test]
async fn a_budget_charged_after_each_response_refuses_once_in_debt() {
    let minute = Duration::from_secs(60);
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow {
            precision: 6,
            edge: Edge::Interpolate,
        },
    ] {
        let clock = ManualClock::new(Timestamp::from_micros(START));
        let limiter = Limiter::with_clock(MemoryStore::new(), clock.clone());
        let budget = Limit::new(algorithm, 1000, minute).unwrap();
        let tenant = Key::new("t1").unwrap();
        let mut answers = Vec::new();
        for _ in 0..4 {
            let admitted = limiter.peek(&tenant, &budget).await.unwrap().allowed();
            answers.push(admitted);
            if admitted {
                let after = limiter.charge_usage(&tenant, &budget, 600).await.unwrap();
                assert_eq!(after.limit, 1000, "{algorithm}");
            }
            clock.advance(Duration::from_millis(100));
        }
        assert_eq!(answers, [true, true, false, false], "{algorithm}");
    }
}

/// Usage never denies the batch it is in, lands whatever the other limits decide, and
/// a `distinct` limit or a usage too large for the state's exact numbers is refused.
#[tokio::test]
async fn usage_lands_beside_a_denial_and_bad_usage_is_refused() {
    let store = MemoryStore::new();
    let now = Timestamp::from_micros(START);
    let key = Key::new("k").unwrap();
    let minute = Duration::from_secs(60);
    let budget = Limit::new(Algorithm::FixedWindow, 10, minute).unwrap();
    let strict = Limit::new(Algorithm::Gcra, 1, minute).unwrap();
    // Spend the strict limit, then a batch: a request it denies, and usage of 25.
    assert!(
        store
            .decide_one(Request::new(&key, &strict, 1), now)
            .unwrap()
            .allowed()
    );
    let batch = store
        .check(
            &[
                Request::new(&key, &strict, 1),
                Request::usage(&key, &budget, 25),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(batch.denied_by, Some(0));
    assert!(!batch.decisions[1].allowed(), "25 of 10: in debt");
    let look = store
        .decide_one(Request::new(&key, &budget, 0), now)
        .unwrap();
    assert!(!look.allowed() && look.remaining == 0);
    // Usage alone never denies its batch, even into debt.
    let alone = store
        .check(&[Request::usage(&key, &budget, 5)], now)
        .await
        .unwrap();
    assert_eq!(alone.denied_by, None);

    let distinct = Limit::new(Algorithm::Distinct { precision: 1 }, 10, minute).unwrap();
    let err = store
        .decide_one(Request::usage(&key, &distinct, 1).with_member(b"m"), now)
        .unwrap_err();
    assert!(err.to_string().contains("counts members"), "{err}");
    let hourly = Limit::new(Algorithm::TokenBucket, 1, Duration::from_secs(3600)).unwrap();
    let too_much = hourly.max_usage() + 1;
    let err = store
        .decide_one(Request::usage(&key, &hourly, too_much), now)
        .unwrap_err();
    assert!(err.to_string().contains("can be charged at once"), "{err}");
}

/// docs/metering.md's bound on one usage ("for 60,000 a minute, about 4.5 trillion
/// tokens") is what `Limit::max_usage` allows that budget, on a token bucket and GCRA.
#[test]
fn the_documented_bound_on_one_usage_is_max_usage() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/metering.md"
    ))
    .unwrap();
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let budget = Limit::new(algorithm, 60_000, Duration::from_secs(60)).unwrap();
        let said = format!(
            "(for 60,000 a minute, about {:.1} trillion tokens)",
            budget.max_usage() as f64 / 1e12
        );
        assert!(
            page.contains(&said),
            "{algorithm}: docs/metering.md should say {said}"
        );
    }
}
