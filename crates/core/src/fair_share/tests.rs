use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::Timestamp;

const T0: Timestamp = Timestamp::from_secs(1_700_000_000);

fn ask<'a>(holder: &'a str, demand: f64, rate: f64) -> Ask<'a> {
    Ask {
        holder,
        demand,
        rate,
        ttl: Duration::from_secs(16),
        floor: FLOOR,
        headroom: 0,
        replaces: None,
        running: 0.0,
    }
}

#[test]
fn busy_envoys_get_most_of_the_rate_and_an_idle_one_its_floor() {
    // 10 a second; one idle, one at 2× an even third, one far above.
    let s = fair(10.0, FLOOR, &[0.0, 6.7, 100.0], 0);
    assert!((s.iter().sum::<f64>() - 10.0).abs() < 1e-9, "{s:?}");
    assert!(
        (s[0] - 1.0 / 3.0).abs() < 1e-9,
        "the idle one: its floor, {s:?}"
    );
    assert!(s[1] > 4.0 && s[2] > 4.0, "{s:?}");
    // Demand below the rate: each gets it, the rest spread evenly.
    let s = fair(10.0, FLOOR, &[1.0, 2.0], 0);
    assert!(
        (s[0] - 4.5).abs() < 1e-9 && (s[1] - 5.5).abs() < 1e-9,
        "{s:?}"
    );
}

#[test]
fn a_share_is_written_as_whole_tokens_no_faster_than_it() {
    assert_eq!(token_bucket(10.0), Some((10, 1)));
    // 1.9 a second: 11 every 6 s is the first within 5% (19 every 10 s is exact,
    // and a burst of 19).
    assert_eq!(token_bucket(1.9), Some((11, 6)));
    assert_eq!(token_bucket(1.99), Some((19, 10)));
    assert_eq!(token_bucket(10.5), Some((10, 1)));
    assert_eq!(token_bucket(0.5), Some((1, 2)));
    assert_eq!(token_bucket(1.0 / 90.0), Some((1, 90)));
    assert_eq!(token_bucket(1.0 / 7200.0), None);
    assert_eq!(token_bucket(0.0), None);
}

#[test]
fn a_second_holder_gets_what_the_first_leaves_and_the_first_shrinks_at_its_own_grant() {
    let mut shares = Shares::default();
    let a = shares.grant(&ask("a", 100.0, 10.0), T0);
    assert!((a.share - 10.0).abs() < 1e-9, "{a:?}");
    // b's fair share is 5, but a holds all 10 until its next grant.
    let b = shares.grant(&ask("b", 100.0, 10.0), T0);
    assert!(b.withheld && b.share == 0.0, "{b:?}");
    let a = shares.grant(&ask("a", 100.0, 10.0), T0);
    assert!(
        (a.share - 5.0).abs() < 1e-9 && (a.assigned - 5.0).abs() < 1e-9,
        "{a:?}"
    );
    let b = shares.grant(&ask("b", 100.0, 10.0), T0);
    assert!((b.share - 5.0).abs() < 1e-9 && !b.withheld, "{b:?}");
    assert!((b.assigned - 10.0).abs() < 1e-9, "{b:?}");
}

#[test]
fn a_decrease_stays_booked_as_what_envoy_runs_until_it_has_the_new_one() {
    let mut shares = Shares::default();
    shares.grant(&ask("a", 100.0, 10.0), T0);
    shares.grant(&ask("b", 100.0, 10.0), T0);
    // a's Envoy runs 10 and is sent 5: 10 stays booked, b still gets nothing.
    let a = shares.grant(
        &Ask {
            running: 10.0,
            ..ask("a", 100.0, 10.0)
        },
        T0,
    );
    assert!(
        (a.share - 5.0).abs() < 1e-9 && (a.assigned - 10.0).abs() < 1e-9,
        "{a:?}"
    );
    let b = shares.grant(&ask("b", 100.0, 10.0), T0);
    assert!(b.withheld, "{b:?}");
    // Delivered: a runs 5, settled at once (never below what was last granted).
    shares.settle("a", 1.0, T0);
    let b = shares.grant(&ask("b", 100.0, 10.0), T0);
    assert!((b.share - 5.0).abs() < 1e-9, "{b:?}");
    let booked: f64 = shares.live(T0).iter().map(|h| h.share).sum();
    assert!((booked - 10.0).abs() < 1e-9, "{booked}");
}

#[test]
fn a_lowered_rate_shrinks_each_holder_at_its_grant_never_to_a_denial() {
    let mut shares = Shares::default();
    shares.grant(&ask("a", 100.0, 10.0), T0);
    shares.grant(&ask("b", 100.0, 10.0), T0);
    shares.grant(&ask("a", 100.0, 10.0), T0);
    shares.grant(&ask("b", 100.0, 10.0), T0);
    // 5 + 5 booked; the rate drops to 4.
    let a = shares.grant(&ask("a", 100.0, 4.0), T0);
    assert!((a.share - 2.0).abs() < 1e-9, "{a:?}");
    let b = shares.grant(&ask("b", 100.0, 4.0), T0);
    assert!(
        (b.share - 2.0).abs() < 1e-9 && (b.assigned - 4.0).abs() < 1e-9,
        "{b:?}"
    );
}

#[test]
fn a_replaced_holders_share_is_the_new_ones_and_a_lapsed_one_is_forgotten() {
    let mut shares = Shares::default();
    shares.grant(&ask("old", 100.0, 10.0), T0);
    let new = shares.grant(
        &Ask {
            replaces: Some("old"),
            ..ask("new", 100.0, 10.0)
        },
        T0,
    );
    assert!(
        (new.share - 10.0).abs() < 1e-9 && new.holders == 1,
        "{new:?}"
    );
    assert_eq!(shares.live(T0).len(), 1);
    let later = T0.saturating_add(Duration::from_secs(16));
    assert!(shares.live(later).is_empty());
    assert!(shares.forget(later));
}

proptest! {
    /// The shares add up to the rate (never more), none is negative, each is at
    /// least its floor, and a client asking for no more than an even split gets at
    /// least what it asks.
    #[test]
    fn shares_add_up_to_the_rate(
        rate in 0.01f64..10_000.0,
        demands in prop::collection::vec(0.0f64..20_000.0, 1..12),
        headroom in 0usize..3,
    ) {
        let s = fair(rate, FLOOR, &demands, headroom);
        let n = demands.len() as f64;
        let kept = rate * FLOOR / (n + headroom as f64) * headroom as f64;
        let total: f64 = s.iter().sum::<f64>() + kept;
        prop_assert!(total <= rate * (1.0 + 1e-9), "{total} > {rate}");
        prop_assert!(total >= rate * (1.0 - 1e-9), "{total} < {rate}");
        let n = n + headroom as f64;
        for (d, share) in demands.iter().zip(&s) {
            prop_assert!(*share >= rate * FLOOR / n * (1.0 - 1e-9));
            if *d <= rate / n {
                prop_assert!(*share >= d * (1.0 - 1e-9), "{share} < {d}");
            }
        }
    }

    /// A token bucket never runs faster than its share, loses little of it (at most
    /// 5%, or a sixtieth of a request a second), and its burst (one fill) is less than a
    /// second of the share plus 20 requests.
    #[test]
    fn a_token_bucket_never_runs_faster_than_its_share(share in 0.0003f64..100_000.0) {
        let (tokens, secs) = token_bucket(share).unwrap();
        let rate = f64::from(tokens) / secs as f64;
        prop_assert!(rate <= share * (1.0 + 1e-12), "{rate} > {share}");
        if share >= 1.0 / 60.0 {
            prop_assert!(
                rate >= share * (1.0 - CLOSE) - 1e-9 || share - rate <= 1.0 / 60.0 + 1e-9,
                "{rate} of {share}"
            );
        }
        prop_assert!(f64::from(tokens) < share + 20.0, "{tokens} every {secs} s of {share}");
    }

    /// Whatever holders ask, in any order, with renewals, lapses and replacements,
    /// what is booked never adds up to more than the rate, and a holder is never sent
    /// more than its fair share.
    #[test]
    fn bookings_never_add_up_to_more_than_the_rate(
        steps in prop::collection::vec((0usize..5, 0.0f64..50.0, 0u64..20, any::<bool>()), 1..80),
    ) {
        let names = ["a", "b", "c", "d", "e"];
        let mut shares = Shares::default();
        let mut now = T0;
        // What each Envoy runs: the share it was last sent, until its TTL.
        let mut running = [(0.0f64, T0); 5];
        for (who, demand, wait, replace) in steps {
            now = now.saturating_add(Duration::from_millis(wait * 500));
            let replaces = (replace && who > 0).then(|| names[who - 1]);
            if replaces.is_some() {
                running[who] = running[who - 1];
                running[who - 1] = (0.0, T0);
            }
            let runs = if running[who].1 > now { running[who].0 } else { 0.0 };
            let a = Ask {
                replaces,
                running: runs,
                ..ask(names[who], demand, 10.0)
            };
            let g = shares.grant(&a, now);
            // Half the answers are taken at once (and settled), half not yet: what the
            // Envoy runs is the share it last took.
            let taken = !g.withheld && wait % 2 == 0;
            if taken {
                running[who] = (g.share, now.saturating_add(Duration::from_secs(15)));
                shares.settle(names[who], g.share, now);
            }
            let booked: f64 = shares.live(now).iter().map(|h| h.share).sum();
            prop_assert!(booked <= 10.0 + 1e-6, "{booked} booked");
            if !taken {
                prop_assert!((booked - g.assigned).abs() < 1e-6);
            }
        }
    }
}
