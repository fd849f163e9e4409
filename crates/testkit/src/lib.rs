//! Dev-only test support for Spillway: conformance scenarios that every [`Store`]
//! runs, so the memory store, standalone Redis and Redis Cluster are held to the same
//! decisions, down to the microsecond; and the real Redis servers those tests use
//! ([`redis`]).
//!
//! A scenario is a table of steps on a [`ManualClock`]: advance the clock, check a
//! batch and compare every decision field (outcome, retry_after, limit, remaining,
//! reset_after) with the expected one, or reset a key. The expected values were
//! worked out by hand from the algorithm definitions in `spillway_core::algorithm`.
//!
//! ```no_run
//! # async fn example() {
//! let store = spillway_core::MemoryStore::new();
//! spillway_testkit::conformance::run_all(&store).await;
//! # }
//! ```
//!
//! [`Store`]: spillway_core::Store
//! [`ManualClock`]: spillway_core::ManualClock

#![forbid(unsafe_code)]

pub mod ads;
pub mod conformance;
pub mod liar;
pub mod port;
pub mod proxy;
pub mod redis;
mod scenarios;
pub mod tls;

pub use scenarios::{T0, all as scenarios};

/// The value of the Prometheus series whose lines start with `series` (a name and the
/// start of its labels, `name{a="b"`), summed over every line that does; 0 if none.
pub fn metric(exposition: &str, series: &str) -> u64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The value of the series `name{labels}` (written whole, as the exposition writes it)
/// in a Prometheus text exposition, if it has one.
pub fn prometheus_series(exposition: &str, name_and_labels: &str) -> Option<u64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}
