//! Calendar periods (`Calendar`, `LimitBuilder::calendar`): a billing month in a named
//! time zone resets at that zone's midnight on the 1st, whatever daylight saving did in
//! between, on every store, decided on a manual clock.

use std::time::Duration;

use spillway_core::{
    Algorithm, Calendar, Key, Limit, Limiter, ManualClock, MemoryStore, Period, Timestamp,
};

/// `2026-10-31 23:59:59` and so on, as a UTC instant, from an RFC 3339 time with offset.
fn at(rfc3339: &str) -> Timestamp {
    let ts: jiff::Timestamp = rfc3339.parse().unwrap();
    Timestamp::from_micros(ts.as_microsecond() as u64)
}

fn hours(calendar: &Calendar, when: &str) -> u64 {
    let (start, end) = calendar.bounds(at(when).as_micros());
    (end - start) / 3_600_000_000
}

#[test]
fn periods_are_as_long_as_the_calendar_says() {
    let berlin = |p| Calendar::new(p, "Europe/Berlin").unwrap();
    // October 2026 ends summer time (the 25th): 31 days and an hour.
    assert_eq!(
        hours(&berlin(Period::Month), "2026-10-15T12:00:00+02:00"),
        745
    );
    assert_eq!(
        hours(&berlin(Period::Month), "2026-11-15T12:00:00+01:00"),
        720
    );
    // March 2026 starts it (the 29th): 31 days less an hour.
    assert_eq!(
        hours(&berlin(Period::Month), "2026-03-02T00:00:00+01:00"),
        743
    );
    assert_eq!(
        hours(&berlin(Period::Month), "2026-02-10T00:00:00+01:00"),
        28 * 24
    );
    assert_eq!(hours(&berlin(Period::Day), "2026-10-25T12:00:00+01:00"), 25);
    assert_eq!(hours(&berlin(Period::Day), "2026-03-29T12:00:00+02:00"), 23);
    assert_eq!(
        hours(&Calendar::utc(Period::Year), "2028-06-01T00:00:00Z"),
        366 * 24
    );
    // An ISO week starts on Monday: Thursday 2026-11-26's began on the 23rd.
    let week = Calendar::utc(Period::Week);
    let (start, end) = week.bounds(at("2026-11-26T10:00:00Z").as_micros());
    assert_eq!(start, at("2026-11-23T00:00:00Z").as_micros());
    assert_eq!(end, at("2026-11-30T00:00:00Z").as_micros());
    // The month starts at Berlin's midnight, an hour before UTC's in winter.
    let (start, _) = berlin(Period::Month).bounds(at("2026-11-01T00:30:00+01:00").as_micros());
    assert_eq!(start, at("2026-10-31T23:00:00Z").as_micros());
    assert!(Calendar::new(Period::Month, "Mars/Olympus").is_err());
}

/// A budget of 3 a month in Europe/Berlin, spent on October 2nd: still spent on the
/// 31st at 23:59:59 local time (after the change back from summer time on the 25th),
/// and whole again at 00:00:00 local time on November 1st, which is 23:00 UTC.
#[tokio::test]
async fn a_berlin_month_resets_at_local_midnight_on_the_first_across_dst() {
    let calendar = Calendar::new(Period::Month, "Europe/Berlin").unwrap();
    let budget = Limit::builder(Algorithm::FixedWindow, 3, calendar.period().longest())
        .calendar(calendar)
        .build()
        .unwrap();
    let clock = ManualClock::new(at("2026-10-02T09:00:00+02:00"));
    let limiter = Limiter::with_clock(MemoryStore::new(), clock.clone());
    let key = Key::new("tenant-7").unwrap();
    for _ in 0..3 {
        assert!(limiter.check(&key, &budget).await.unwrap().allowed());
    }
    clock.set(at("2026-10-31T23:59:59+01:00"));
    let d = limiter.check(&key, &budget).await.unwrap();
    assert!(!d.allowed());
    assert_eq!(
        d.retry_after(),
        Some(Duration::from_secs(1)),
        "resets at local midnight"
    );
    clock.set(at("2026-11-01T00:00:00+01:00"));
    let d = limiter.check(&key, &budget).await.unwrap();
    assert!(d.allowed(), "{d:?}");
    assert_eq!(d.remaining, 2);
    // November has 30 days: the next reset is December 1st at Berlin's midnight.
    assert_eq!(d.reset_after, Duration::from_secs(30 * 86_400));
    // The same limit in UTC would still be in October until an hour later.
    let utc = Limit::builder(Algorithm::FixedWindow, 3, Period::Month.longest())
        .calendar(Calendar::utc(Period::Month))
        .build()
        .unwrap();
    assert_ne!(
        budget.shape(),
        utc.shape(),
        "two calendars never share a count"
    );
}

#[test]
fn a_calendar_period_is_for_fixed_windows_without_count_rejected() {
    let month = || Calendar::utc(Period::Month);
    let err = Limit::builder(Algorithm::Gcra, 3, Period::Month.longest())
        .calendar(month())
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("fixed_window"), "{err}");
    let err = Limit::builder(Algorithm::FixedWindow, 3, Period::Month.longest())
        .calendar(month())
        .count_rejected(true)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("count_rejected"), "{err}");
}

/// A day whose midnight never happens: in America/Santiago daylight saving starts on
/// Sunday 2026-09-06 at 00:00, when the clocks go from 23:59:59 to 01:00. That day's
/// period starts at its first instant, 01:00 (−03), which is the previous day's end,
/// and lasts 23 hours. A daily budget spent on the 5th is refused at 23:59:59 and whole
/// again at that first instant.
#[tokio::test]
async fn a_day_whose_midnight_is_skipped_starts_at_its_first_instant() {
    let calendar = Calendar::new(Period::Day, "America/Santiago").unwrap();
    let (start, end) = calendar.bounds(at("2026-09-06T12:00:00-03:00").as_micros());
    assert_eq!(start, at("2026-09-06T01:00:00-03:00").as_micros());
    assert_eq!(end, at("2026-09-07T00:00:00-03:00").as_micros());
    assert_eq!(hours(&calendar, "2026-09-06T12:00:00-03:00"), 23);
    let (_, before) = calendar.bounds(at("2026-09-05T12:00:00-04:00").as_micros());
    assert_eq!(before, start, "the 5th ends where the 6th begins");

    let budget = Limit::builder(Algorithm::FixedWindow, 2, calendar.period().longest())
        .calendar(calendar)
        .build()
        .unwrap();
    let clock = ManualClock::new(at("2026-09-05T09:00:00-04:00"));
    let limiter = Limiter::with_clock(MemoryStore::new(), clock.clone());
    let key = Key::new("tenant-cl").unwrap();
    for _ in 0..2 {
        assert!(limiter.check(&key, &budget).await.unwrap().allowed());
    }
    clock.set(at("2026-09-05T23:59:59-04:00"));
    let d = limiter.check(&key, &budget).await.unwrap();
    assert!(!d.allowed());
    assert_eq!(d.retry_after(), Some(Duration::from_secs(1)));
    clock.set(at("2026-09-06T01:00:00-03:00"));
    let d = limiter.check(&key, &budget).await.unwrap();
    assert!(d.allowed(), "{d:?}");
    assert_eq!(d.reset_after, Duration::from_secs(23 * 3600));
}
