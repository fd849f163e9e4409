//! Calendar periods on Redis (standalone and Cluster): the key names its period by the
//! period's start and its calendar, the script takes the period's end from Rust (Lua
//! cannot compute a time zone's midnight), and a Berlin month resets at Berlin's
//! midnight on the 1st across the change back from summer time, as on the memory store.

use crate::support;

use std::time::Duration;

use spillway_core::{
    Algorithm, Calendar, Key, Limit, MemoryStore, Period, Request, Store, Timestamp,
};

fn at(rfc3339: &str) -> Timestamp {
    let ts: jiff::Timestamp = rfc3339.parse().unwrap();
    Timestamp::from_micros(ts.as_microsecond() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_berlin_month_resets_at_local_midnight_on_redis_as_in_memory() {
    let calendar = Calendar::new(Period::Month, "Europe/Berlin").unwrap();
    let budget = Limit::builder(Algorithm::FixedWindow, 3, Period::Month.longest())
        .calendar(calendar)
        .build()
        .unwrap();
    let key = Key::new("tenant-7").unwrap();
    let memory = MemoryStore::new();
    for (name, url) in support::targets() {
        let redis = support::caller_clock_store(&url, "calendar").await;
        let mut answers = Vec::new();
        for (when, usage) in [
            ("2026-10-02T09:00:00+02:00", 0),
            ("2026-10-02T09:00:01+02:00", 0),
            ("2026-10-20T09:00:00+02:00", 0),
            ("2026-10-31T23:59:59+01:00", 0),
            ("2026-10-31T23:59:59+01:00", 5),
            ("2026-11-01T00:00:00+01:00", 0),
            ("2026-11-30T23:59:59+01:00", 0),
        ] {
            let now = at(when);
            let request = match usage {
                0 => Request::new(&key, &budget, 1),
                n => Request::usage(&key, &budget, n),
            };
            let got = redis.check(&[request], now).await.unwrap();
            let want = memory.check(&[request], now).await.unwrap();
            assert_eq!(got, want, "{name} at {when}");
            answers.push(got.decisions[0].allowed());
        }
        // Three in October; the fourth denied a second before Berlin's midnight (and
        // usage past it into debt, which ends with the month); November's first
        // admitted at Berlin's midnight, which is 23:00 UTC.
        assert_eq!(
            answers,
            [true, true, true, false, false, true, true],
            "{name}"
        );
        let d = redis
            .check(
                &[Request::new(&key, &budget, 0)],
                at("2026-11-01T00:00:00+01:00"),
            )
            .await
            .unwrap();
        assert_eq!(
            d.decisions[0].reset_after,
            Duration::from_secs(30 * 86_400),
            "{name}"
        );
        // The memory store's state is per process; start it afresh for the next target.
        memory.clear(&key, &budget);
    }
}
