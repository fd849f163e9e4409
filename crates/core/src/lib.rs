//! Spillway's core: time, limits, decisions, the five rate limiting algorithms, the
//! [`Store`] trait with the in-process [`MemoryStore`], and the [`Limiter`] facade.
//!
//! | algorithm | state per key | bound in any window of length W |
//! |---|---|---|
//! | [`FixedWindow`](Algorithm::FixedWindow) | 16 B | `limit` per aligned window; up to 2 × `limit` across an edge |
//! | [`SlidingLog`](Algorithm::SlidingLog) | 16 B per admitted request | `limit`, exactly |
//! | [`SlidingWindow`](Algorithm::SlidingWindow) | 8 B × (precision + 1) | approximate; `strict` never above `limit` |
//! | [`TokenBucket`](Algorithm::TokenBucket) | 16 B | `burst + limit` |
//! | [`Gcra`](Algorithm::Gcra) | 8 B | `burst + limit` |
//!
//! Every algorithm takes weighted costs (0 = peek), and a batch of limits is decided
//! all or nothing: a request is charged against every limit or none. A denial is an
//! `Ok(Decision)`; `Err` means no decision could be made.
//!
//! ```
//! use spillway_core::{Algorithm, Key, Limit, Limiter, ManualClock, MemoryStore, Request, Timestamp};
//! use std::time::Duration;
//!
//! # tokio_test();
//! # fn tokio_test() { let rt = tokio::runtime::Builder::new_current_thread().build().unwrap(); rt.block_on(async {
//! let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
//! let limiter = Limiter::with_clock(MemoryStore::new(), clock.clone());
//!
//! let per_second = Limit::builder(Algorithm::Gcra, 10, Duration::from_secs(1)).burst(2).build()?;
//! let per_day = Limit::new(Algorithm::FixedWindow, 10_000, Duration::from_secs(86_400))?;
//! let user = Key::new("user:42")?;
//!
//! let both = [Request::new(&user, &per_second, 1), Request::new(&user, &per_day, 1)];
//! assert!(limiter.check_all(&both).await?.allowed());
//! assert!(limiter.check_all(&both).await?.allowed());
//! let third = limiter.check_all(&both).await?;
//! assert_eq!(third.denied_by, Some(0)); // the burst is spent...
//! assert_eq!(third.retry_after(), Some(Duration::from_millis(100)));
//! assert_eq!(third.decisions[1].remaining, 9_998); // ...and the daily quota was not charged
//!
//! clock.advance(Duration::from_millis(100));
//! assert!(limiter.check(&user, &per_second).await?.allowed());
//! # Ok::<(), spillway_core::Error>(()) }).unwrap(); }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod algorithm;
mod breaker;
mod calendar;
mod clock;
mod decision;
mod error;
pub mod fair_share;
pub mod headers;
mod key;
mod limit;
mod limiter;
mod mode;
pub mod sharing;
pub mod store;
mod time;

pub use algorithm::concurrency::{Ticket, TicketKind};
pub use algorithm::{Algorithm, Edge, State};
pub use breaker::{
    Breaker, BreakerState, DEFAULT_COOLDOWN, DEFAULT_FAILURE_RATIO, DEFAULT_FAILURES_TO_OPEN,
    DEFAULT_WINDOW, StoreFailure, Trip,
};
pub use calendar::{Calendar, Period};
pub use clock::{Clock, CoarseClock, ManualClock, SystemClock};
pub use decision::{BatchDecision, Crossing, Decision, Outcome, longest_retry};
pub use error::Error;
pub use key::{Key, MAX_KEY_LEN};
pub use limit::{
    Limit, LimitBuilder, MAX_ALERTS, MAX_EXACT, MAX_PRECISION, MAX_WAIT, MAX_WINDOW, Rejected,
    Shape,
};
pub use limiter::{
    Hold, Limiter, Renewing, Reservation, Settlement, keep_renewed, new_hold_id, release_detached,
};
pub use mode::{Mode, OnStoreError};
pub use sharing::Sharing;
pub use store::{
    DEFAULT_DENY_CACHE_BYTES, DEFAULT_MEMORY_STORE_BYTES, DenyCache, Guard, Guarded, GuardedStore,
    HEAVY_WORK, HashKeys, Keep, KeyHash, MAX_BATCH, MemoryStore, MemoryStoreBuilder, Records,
    Rehash, Report, Request, Source, Store, Unanswered, is_heavy, report, work,
};
pub use time::Timestamp;
