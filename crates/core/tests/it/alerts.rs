//! Budget alerts (`alert_at`): each threshold of a fixed window's limit is reached once
//! per key and window, by the charge that first reaches it; a refund below it and a
//! charge past it again do not reach it twice; a new window starts over.

use std::time::Duration;

use spillway_core::{
    Algorithm, Calendar, Crossing, Key, Limit, MemoryStore, Period, Request, Store, Timestamp,
};

const T0: u64 = 1_800_000_000_000_000; // a whole hour: windows align to it

/// The memory store answers at once: its futures need no runtime.
fn now_or_never<F: std::future::Future>(f: F) -> F::Output {
    futures_util::FutureExt::now_or_never(f).expect("the memory store answers at once")
}

fn at(secs: u64) -> Timestamp {
    Timestamp::from_micros(T0 + secs * 1_000_000)
}

#[test]
fn each_threshold_is_reached_once_a_window_whatever_is_given_back() {
    let limit = Limit::builder(Algorithm::FixedWindow, 1000, Duration::from_secs(3600))
        .alert_at(&[800, 900, 1000])
        .build()
        .unwrap();
    assert_eq!(limit.alert_at(), [800, 900, 1000]);
    let store = MemoryStore::new();
    let key = Key::new("tenant=acme").unwrap();
    let usage = |units: u64| Request::usage(&key, &limit, units);
    let alerts = |requests: Vec<Request<'_>>, t: u64| {
        let decided = now_or_never(store.check(&requests, at(t)));
        decided.unwrap().alerts
    };
    let crossing = |from, to, used| Crossing {
        request: 0,
        from,
        to,
        used,
    };

    assert_eq!(alerts(vec![usage(700)], 1), []);
    assert_eq!(alerts(vec![usage(150)], 2), [crossing(0, 1, 850)]);
    // Given back below 0.8, and past it again: not reached twice.
    let refund = Request::refund(&key, &limit, 100, at(2));
    assert_eq!(alerts(vec![refund], 3), []);
    assert_eq!(alerts(vec![usage(100)], 4), []);
    // Past 0.9 and 1.0 at once (usage goes into debt): both, in one crossing.
    assert_eq!(alerts(vec![usage(300)], 5), [crossing(1, 3, 1150)]);
    assert_eq!(alerts(vec![usage(1)], 6), []);
    // An admitted request reaches one too, in the next window, which starts over.
    let take = Request::new(&key, &limit, 800);
    assert_eq!(alerts(vec![take], 3600), [crossing(0, 1, 800)]);
    // A denied one charges nothing and reaches nothing.
    assert_eq!(alerts(vec![Request::new(&key, &limit, 300)], 3601), []);
    // In a batch, the request that carries the limit is named.
    let other = Key::new("tenant=other").unwrap();
    let plain = Limit::new(Algorithm::FixedWindow, 10, Duration::from_secs(60)).unwrap();
    let batch = vec![
        Request::new(&other, &plain, 1),
        Request::new(&key, &limit, 100),
    ];
    let got = alerts(batch, 3602);
    assert_eq!(
        got,
        [Crossing {
            request: 1,
            from: 1,
            to: 2,
            used: 900
        }]
    );
}

#[test]
fn a_calendar_months_thresholds_start_over_on_the_first() {
    let calendar = Calendar::new(Period::Month, "UTC").unwrap();
    let limit = Limit::builder(Algorithm::FixedWindow, 2_000_000, Duration::from_secs(1))
        .calendar(calendar)
        .alert_at(&[500])
        .build()
        .unwrap();
    let store = MemoryStore::new();
    let key = Key::new("tenant=acme").unwrap();
    // 2027-01-31 and 2027-02-01, UTC.
    let (jan, feb) = (
        Timestamp::from_secs(1_801_353_600),
        Timestamp::from_secs(1_801_440_000),
    );
    let charge = |now| {
        let r = [Request::usage(&key, &limit, 1_000_000)];
        now_or_never(store.check(&r, now)).unwrap().alerts.len()
    };
    assert_eq!(charge(jan), 1);
    assert_eq!(charge(jan), 0, "reached already this month");
    assert_eq!(charge(feb), 1, "a new month");
}

#[test]
fn alerts_apply_to_fixed_windows_that_count_what_they_admit() {
    let hour = Duration::from_secs(3600);
    let refused = |b: spillway_core::LimitBuilder, why: &str| {
        let e = b.build().unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    };
    refused(
        Limit::builder(Algorithm::Gcra, 10, hour).alert_at(&[800]),
        "not gcra",
    );
    refused(
        Limit::builder(Algorithm::FixedWindow, 10, hour)
            .count_rejected(true)
            .alert_at(&[800]),
        "with count_rejected",
    );
    for bad in [&[900, 800][..], &[0], &[1001], &[500, 500]] {
        refused(
            Limit::builder(Algorithm::FixedWindow, 10, hour).alert_at(bad),
            "ascending",
        );
    }
    refused(
        Limit::builder(Algorithm::FixedWindow, 10, hour).alert_at(&[1, 2, 3, 4, 5, 6, 7, 8, 9]),
        "at most 8",
    );
}
