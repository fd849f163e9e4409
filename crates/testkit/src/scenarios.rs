//! The scenario tables. Times are offsets from `T0`, which is aligned to a day, so
//! every window below starts at `T0`. Each expected decision is derived in the comment
//! beside it from the algorithm's definition.

use std::time::Duration;

use spillway_core::{Algorithm, Decision, Edge, Limit, Outcome, Rejected, Timestamp};

use crate::conformance::{Scenario, Step};

/// Where every scenario's clock starts: 2023-12-09T00:00:00Z (19,700 days after the epoch).
pub const T0: Timestamp = Timestamp::from_secs(19_700 * 86_400);

/// Every scenario.
pub fn all() -> Vec<Scenario> {
    vec![
        fixed_window(),
        sliding_log(),
        token_bucket(),
        token_bucket_fractional_refill(),
        gcra(),
        gcra_fractional_interval(),
        sliding_window_edges(Edge::Strict),
        sliding_window_edges(Edge::Interpolate),
        sliding_window_edges(Edge::Lenient),
        sliding_window_classic(),
        multi_limit_all_or_nothing(),
        count_rejected(),
        count_rejected_in_batches(),
        count_own_rejections_in_batches(),
        reset(),
        distinct(),
    ]
}

// === helpers ===

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}
fn limit(algorithm: Algorithm, n: u64, window: Duration) -> Limit {
    Limit::new(algorithm, n, window).expect("valid limit")
}
fn burst(algorithm: Algorithm, n: u64, window: Duration, burst: u64) -> Limit {
    Limit::builder(algorithm, n, window)
        .burst(burst)
        .build()
        .expect("valid limit")
}
fn counting_rejected(algorithm: Algorithm, n: u64, window: Duration) -> Limit {
    Limit::builder(algorithm, n, window)
        .count_rejected(true)
        .build()
        .expect("valid limit")
}
fn ok(limit: u64, remaining: u64, reset: Duration) -> Decision {
    Decision {
        outcome: Outcome::Allowed,
        limit,
        remaining,
        reset_after: reset,
        wait: std::time::Duration::ZERO,
        borrowed: false,
        queued: false,
    }
}
fn denied(limit: u64, retry_after: Duration, remaining: u64, reset: Duration) -> Decision {
    Decision {
        outcome: Outcome::Denied { retry_after },
        limit,
        remaining,
        reset_after: reset,
        wait: std::time::Duration::ZERO,
        borrowed: false,
        queued: false,
    }
}
fn never(limit: u64, remaining: u64, reset: Duration) -> Decision {
    Decision {
        outcome: Outcome::CostExceedsCapacity,
        limit,
        remaining,
        reset_after: reset,
        wait: std::time::Duration::ZERO,
        borrowed: false,
        queued: false,
    }
}
/// One request for key "k" bringing `member`.
fn member(limit: &Limit, cost: u64, member: &'static str, want: Decision) -> Step {
    Step::Member {
        key: "k",
        limit: limit.clone(),
        cost,
        member,
        want,
    }
}
fn adv(d: Duration) -> Step {
    Step::Advance(d)
}
/// One request for key "k".
fn one(limit: &Limit, cost: u64, want: Decision) -> Step {
    let denied_by = (!want.allowed()).then_some(0);
    Step::Check {
        batch: vec![("k", limit.clone(), cost)],
        denied_by,
        want: vec![want],
    }
}
fn batch(
    items: &[(&'static str, &Limit, u64)],
    denied_by: Option<usize>,
    want: Vec<Decision>,
) -> Step {
    let batch = items
        .iter()
        .map(|(k, l, c)| (*k, (*l).clone(), *c))
        .collect();
    Step::Check {
        batch,
        denied_by,
        want,
    }
}

// === scenarios ===

fn fixed_window() -> Scenario {
    let l = limit(Algorithm::FixedWindow, 3, ms(1000));
    Scenario {
        name: "fixed_window",
        steps: vec![
            one(&l, 1, ok(3, 2, ms(1000))),
            one(&l, 1, ok(3, 1, ms(1000))), // same µs twice
            one(&l, 1, ok(3, 0, ms(1000))),
            one(&l, 1, denied(3, ms(1000), 0, ms(1000))), // full until the window ends
            adv(us(999_999)),
            one(&l, 1, denied(3, us(1), 0, us(1))), // last µs of the window
            adv(us(1)),
            one(&l, 2, ok(3, 1, ms(1000))), // new window: count starts at 0
            one(&l, 2, denied(3, ms(1000), 1, ms(1000))), // cost > remaining
            one(&l, 4, never(3, 1, ms(1000))), // cost > capacity: waiting never helps
            one(&l, 0, ok(3, 1, ms(1000))), // peek
            one(&l, 1, ok(3, 0, ms(1000))),
            one(&l, 0, ok(3, 0, ms(1000))), // a peek fits even when full
            adv(ms(250)),
            one(&l, 1, denied(3, ms(750), 0, ms(750))),
            adv(Duration::from_secs(3600)), // long idle; windows stay aligned to the epoch
            one(&l, 3, ok(3, 0, ms(750))),
        ],
    }
}

fn sliding_log() -> Scenario {
    let l = limit(Algorithm::SlidingLog, 3, ms(1000));
    Scenario {
        name: "sliding_log",
        steps: vec![
            one(&l, 1, ok(3, 2, ms(1000))), // entries: 0
            adv(ms(200)),
            one(&l, 1, ok(3, 1, ms(1000))), // entries: 0, 200
            adv(ms(200)),
            one(&l, 1, ok(3, 0, ms(1000))), // entries: 0, 200, 400
            // Full; the entry at 0 leaves at 1000. Reset: the newest (400) leaves at 1400.
            one(&l, 1, denied(3, ms(600), 0, ms(1000))),
            adv(us(599_999)),
            one(&l, 1, denied(3, us(1), 0, us(400_001))),
            adv(us(1)), // 1000: the entry at 0 has left (an entry at t counts in [t, t+W))
            one(&l, 1, ok(3, 0, ms(1000))), // entries: 200, 400, 1000
            // Cost 2 needs two units freed: 200 leaves at 1200, 400 at 1400.
            one(&l, 2, denied(3, ms(400), 0, ms(1000))),
            one(&l, 4, never(3, 0, ms(1000))),
            one(&l, 0, ok(3, 0, ms(1000))),
            adv(ms(1000)),                  // 2000: all gone
            one(&l, 3, ok(3, 0, ms(1000))), // one weighted entry, not three
            adv(ms(999)),
            one(&l, 1, denied(3, ms(1), 0, ms(1))),
            adv(Duration::from_secs(86_400)),
            one(&l, 0, ok(3, 3, ms(0))), // long idle: nothing live, nothing to reset
        ],
    }
}

fn token_bucket() -> Scenario {
    // 10 per second = one token per 100 ms; bucket of 5. Starts full.
    let l = burst(Algorithm::TokenBucket, 10, ms(1000), 5);
    Scenario {
        name: "token_bucket",
        steps: vec![
            one(&l, 5, ok(5, 0, ms(500))), // empty; 500 ms to refill 5
            one(&l, 1, denied(5, ms(100), 0, ms(500))),
            adv(ms(50)),
            one(&l, 1, denied(5, ms(50), 0, ms(450))), // half a token
            adv(ms(50)),
            one(&l, 1, ok(5, 0, ms(500))),
            adv(ms(250)), // 2.5 tokens
            one(&l, 3, denied(5, ms(50), 2, ms(250))),
            one(&l, 2, ok(5, 0, ms(450))), // 0.5 left
            one(&l, 6, never(5, 0, ms(450))),
            one(&l, 0, ok(5, 0, ms(450))),
            adv(Duration::from_secs(3600)), // long idle: full, never more
            one(&l, 1, ok(5, 4, ms(100))),
        ],
    }
}

fn token_bucket_fractional_refill() -> Scenario {
    // 3 per second: one token per 333,333.3 µs, which no whole number of µs is. A bucket
    // that rounded refills would lose the fractions and deny the third request at 1 s.
    let l = limit(Algorithm::TokenBucket, 3, ms(1000));
    Scenario {
        name: "token_bucket_fractional_refill",
        steps: vec![
            one(&l, 3, ok(3, 0, ms(1000))),
            adv(us(333_333)), // 0.999999 tokens
            one(&l, 1, denied(3, us(1), 0, us(666_667))),
            adv(us(1)), // 1.000002 tokens
            one(&l, 1, ok(3, 0, ms(1000))),
            adv(us(333_333)), // 1.000001
            one(&l, 1, ok(3, 0, ms(1000))),
            adv(us(333_333)), // exactly 1: t = 1 s, 3 admitted in the first second plus 3 refilled
            one(&l, 1, ok(3, 0, ms(1000))),
            one(&l, 1, denied(3, us(333_334), 0, ms(1000))),
        ],
    }
}

fn gcra() -> Scenario {
    // Emission interval 100 ms, tolerance τ = 5 × 100 ms.
    let l = burst(Algorithm::Gcra, 10, ms(1000), 5);
    Scenario {
        name: "gcra",
        steps: vec![
            one(&l, 1, ok(5, 4, ms(100))), // TAT = +100
            one(&l, 4, ok(5, 0, ms(500))), // TAT = +500
            one(&l, 1, denied(5, ms(100), 0, ms(500))),
            adv(ms(100)),
            one(&l, 1, ok(5, 0, ms(500))),
            adv(ms(250)), // TAT 250 ms ahead: 2 units of slack
            one(&l, 3, denied(5, ms(50), 2, ms(250))),
            one(&l, 2, ok(5, 0, ms(450))),
            one(&l, 6, never(5, 0, ms(450))),
            one(&l, 0, ok(5, 0, ms(450))),
            adv(Duration::from_secs(3600)),
            one(&l, 1, ok(5, 4, ms(100))),
        ],
    }
}

fn gcra_fractional_interval() -> Scenario {
    // 3 per second: each unit's emission time is rounded up to 333,334 µs.
    let l = burst(Algorithm::Gcra, 3, ms(1000), 1);
    Scenario {
        name: "gcra_fractional_interval",
        steps: vec![
            one(&l, 1, ok(1, 0, us(333_334))),
            adv(us(333_333)),
            one(&l, 1, denied(1, us(1), 0, us(1))),
            adv(us(1)),
            one(&l, 1, ok(1, 0, us(333_334))),
        ],
    }
}

fn sliding_window_edges(edge: Edge) -> Scenario {
    // 4 per second in 2 sub-buckets of 500 ms. 4 at 0, then at 1250 ms the bucket
    // [0, 500) is the partial one: 250 of its 500 ms are still inside the window.
    let l = limit(Algorithm::SlidingWindow { precision: 2, edge }, 4, ms(1000));
    // Reset: the newest bucket stops counting 3 buckets after it starts.
    let mut steps = vec![one(&l, 4, ok(4, 0, ms(1500))), adv(ms(1250))];
    steps.extend(match edge {
        // Counts the partial bucket whole (4): denied until it leaves at 1500.
        Edge::Strict => vec![one(&l, 1, denied(4, ms(250), 0, ms(250)))],
        // Drops it (0).
        Edge::Lenient => vec![
            one(&l, 1, ok(4, 3, ms(1250))),
            one(&l, 3, ok(4, 0, ms(1250))),
        ],
        // Weighs it: 4 × 250/500 = 2. Then 1 + 2 + 2 > 4 until the weight falls to 1 at 1375.
        Edge::Interpolate => vec![
            one(&l, 1, ok(4, 1, ms(1250))),
            one(&l, 2, denied(4, ms(125), 1, ms(1250))),
            adv(ms(125)),
            one(&l, 2, ok(4, 0, ms(1125))),
        ],
    });
    Scenario {
        name: match edge {
            Edge::Strict => "sliding_window_strict",
            Edge::Lenient => "sliding_window_lenient",
            Edge::Interpolate => "sliding_window_interpolate",
        },
        steps,
    }
}

fn sliding_window_classic() -> Scenario {
    // Precision 1: Cloudflare's current + previous counter. 10 per minute.
    let l = limit(
        Algorithm::SlidingWindow {
            precision: 1,
            edge: Edge::Interpolate,
        },
        10,
        Duration::from_secs(60),
    );
    Scenario {
        name: "sliding_window_classic",
        steps: vec![
            one(&l, 6, ok(10, 4, Duration::from_secs(120))),
            adv(Duration::from_secs(75)), // previous = 6 weighted 45/60 = 4.5
            one(&l, 5, ok(10, 0, Duration::from_secs(105))),
            // 5 + 4.5 + 1 > 10 until the weight falls to 4 (40/60 left) at 80 s.
            one(
                &l,
                1,
                denied(10, Duration::from_secs(5), 0, Duration::from_secs(105)),
            ),
            adv(Duration::from_secs(5)),
            one(&l, 1, ok(10, 0, Duration::from_secs(100))),
        ],
    }
}

fn multi_limit_all_or_nothing() -> Scenario {
    let a = limit(Algorithm::FixedWindow, 2, ms(1000));
    let b = limit(Algorithm::SlidingLog, 3, ms(1000));
    let both = [("u", &a, 1), ("u", &b, 1)];
    Scenario {
        name: "multi_limit",
        steps: vec![
            batch(&both, None, vec![ok(2, 1, ms(1000)), ok(3, 2, ms(1000))]),
            batch(&both, None, vec![ok(2, 0, ms(1000)), ok(3, 1, ms(1000))]),
            // a denies; b had room and is not charged.
            batch(
                &both,
                Some(0),
                vec![denied(2, ms(1000), 0, ms(1000)), ok(3, 1, ms(1000))],
            ),
            batch(&[("u", &b, 1)], None, vec![ok(3, 0, ms(1000))]),
            adv(ms(1000)),
            // The second one denies (for good); the first is not charged.
            batch(
                &[("u", &b, 3), ("u", &a, 3)],
                Some(1),
                vec![ok(3, 3, ms(0)), never(2, 2, ms(1000))],
            ),
            batch(&[("u", &b, 3)], None, vec![ok(3, 0, ms(1000))]),
            // Two requests on one state are checked in turn: 2 + 2 > 3.
            adv(ms(1000)),
            batch(
                &[("v", &b, 2), ("v", &b, 2)],
                Some(1),
                vec![ok(3, 3, ms(0)), denied(3, ms(1000), 1, ms(1000))],
            ),
            batch(
                &[("v", &b, 1), ("v", &b, 2)],
                None,
                vec![ok(3, 2, ms(1000)), ok(3, 0, ms(1000))],
            ),
        ],
    }
}

fn count_rejected() -> Scenario {
    let fixed = counting_rejected(Algorithm::FixedWindow, 2, ms(1000));
    let g = Limit::builder(Algorithm::Gcra, 10, ms(1000))
        .burst(1)
        .count_rejected(true)
        .build()
        .expect("valid");
    Scenario {
        name: "count_rejected",
        steps: vec![
            one(&fixed, 1, ok(2, 1, ms(1000))),
            one(&fixed, 1, ok(2, 0, ms(1000))),
            one(&fixed, 1, denied(2, ms(1000), 0, ms(1000))), // charged: count 3
            one(&fixed, 0, denied(2, ms(1000), 0, ms(1000))), // over the limit: even a peek is denied
            adv(ms(1000)),
            one(&fixed, 2, ok(2, 0, ms(1000))),
            // GCRA, 100 ms per unit, burst 1.
            Step::Check {
                batch: vec![("g", g.clone(), 1)],
                denied_by: None,
                want: vec![ok(1, 0, ms(100))],
            },
            adv(ms(50)),
            // Denied and charged: the bucket is emptied from now (TAT = now + 100 ms),
            // so the wait is 100 ms instead of 50.
            Step::Check {
                batch: vec![("g", g.clone(), 1)],
                denied_by: Some(0),
                want: vec![denied(1, ms(100), 0, ms(100))],
            },
            adv(ms(100)),
            Step::Check {
                batch: vec![("g", g, 1)],
                denied_by: None,
                want: vec![ok(1, 0, ms(100))],
            },
        ],
    }
}

fn count_rejected_in_batches() -> Scenario {
    let counting = counting_rejected(Algorithm::SlidingLog, 10, ms(1000));
    let strict = limit(Algorithm::FixedWindow, 1, ms(1000));
    let both = [("y", &counting, 1), ("y", &strict, 1)];
    Scenario {
        name: "count_rejected_batches",
        steps: vec![
            batch(&both, None, vec![ok(10, 9, ms(1000)), ok(1, 0, ms(1000))]),
            // strict denies; the count_rejected limit had room and is charged anyway.
            batch(
                &both,
                Some(1),
                vec![ok(10, 8, ms(1000)), denied(1, ms(1000), 0, ms(1000))],
            ),
            batch(&[("y", &counting, 0)], None, vec![ok(10, 8, ms(1000))]),
        ],
    }
}

/// `Rejected::ChargedWhenOwn` (the reference's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`):
/// a batch another limit denies costs the limit nothing; one it denies itself is
/// charged to it.
fn count_own_rejections_in_batches() -> Scenario {
    let own = Limit::builder(Algorithm::FixedWindow, 2, ms(1000))
        .rejected(Rejected::ChargedWhenOwn)
        .build()
        .expect("valid limit");
    let strict = limit(Algorithm::SlidingLog, 1, ms(1000));
    let both = [("y", &own, 1), ("y", &strict, 1)];
    Scenario {
        name: "count_own_rejections_batches",
        steps: vec![
            batch(&both, None, vec![ok(2, 1, ms(1000)), ok(1, 0, ms(1000))]),
            // strict denies: `own` had room and is not charged.
            batch(
                &both,
                Some(1),
                vec![ok(2, 1, ms(1000)), denied(1, ms(1000), 0, ms(1000))],
            ),
            batch(&[("y", &own, 1)], None, vec![ok(2, 0, ms(1000))]),
            // `own` denies itself: charged (count 3), strict is not.
            batch(
                &both,
                Some(0),
                vec![
                    denied(2, ms(1000), 0, ms(1000)),
                    denied(1, ms(1000), 0, ms(1000)),
                ],
            ),
            // Over its limit, not at it: even a look is denied.
            batch(
                &[("y", &own, 0)],
                Some(0),
                vec![denied(2, ms(1000), 0, ms(1000))],
            ),
        ],
    }
}

fn reset() -> Scenario {
    let l = limit(Algorithm::FixedWindow, 1, ms(1000));
    let other = limit(Algorithm::Gcra, 1, ms(1000));
    Scenario {
        name: "reset",
        steps: vec![
            one(&l, 1, ok(1, 0, ms(1000))),
            Step::Check {
                batch: vec![("k", other.clone(), 1)],
                denied_by: None,
                want: vec![ok(1, 0, ms(1000))],
            },
            one(&l, 1, denied(1, ms(1000), 0, ms(1000))),
            Step::Reset("k", l.clone()),
            one(&l, 1, ok(1, 0, ms(1000))),
            // Resetting one limit leaves the key's other limits alone.
            Step::Check {
                batch: vec![("k", other, 1)],
                denied_by: Some(0),
                want: vec![denied(1, ms(1000), 0, ms(1000))],
            },
        ],
    }
}

/// 3 distinct members per 60 s in 3 sub-windows of 20 s (sub-window j starts at T0).
fn distinct() -> Scenario {
    let l = limit(Algorithm::Distinct { precision: 3 }, 3, ms(60_000));
    let s = |n: u64| ms(n * 1000);
    Scenario {
        name: "distinct",
        steps: vec![
            // a: new, 1 of 3; empty once sub-windows j..j+2 have passed (60 s).
            member(&l, 1, "a", ok(3, 2, s(60))),
            // a again: already counted, adds nothing.
            member(&l, 1, "a", ok(3, 2, s(60))),
            // Sub-window j+1: b, then c: the third; the state lasts until j+1+3 (80 s).
            adv(s(20)),
            member(&l, 1, "b", ok(3, 1, s(60))),
            adv(s(5)),
            member(&l, 1, "c", ok(3, 0, s(55))),
            // d: a fourth. Live: a (j), b and c (j+1); the third most recent is a's,
            // which leaves at j+3 (60 s): retry in 35 s.
            member(&l, 1, "d", denied(3, s(35), 0, s(55))),
            // Asking for a counted member: admitted, nothing charged.
            member(&l, 0, "a", ok(3, 0, s(55))),
            // At j+3, a has left: d fits; the state now lasts until j+6.
            adv(s(35)),
            member(&l, 1, "d", ok(3, 0, s(60))),
            // a is new again: live b, c (j+1) and d (j+3); the third most recent is
            // j+1's, leaving at j+4 (80 s): retry in 20 s.
            member(&l, 1, "a", denied(3, s(20), 0, s(60))),
        ],
    }
}
