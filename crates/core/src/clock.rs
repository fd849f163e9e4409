//! Where time comes from. This is the only module that reads the OS clock
//! (`clippy.toml` bans `SystemTime::now` and `Instant::now` everywhere else):
//! algorithms and stores take `now` as an argument, and the [`Limiter`] asks its
//! [`Clock`].
//!
//! Three clocks:
//! - [`CoarseClock`], the default of [`Limiter::new`] and the tower layer: read with one
//!   atomic load (~1 ns); a background thread refreshes it every millisecond (one thread
//!   per process, shared by every default clock). Time moves in steps of about a
//!   millisecond and never backwards.
//! - [`SystemClock`] reads the OS wall clock on every call (~25–40 ns on a KVM guest
//!   with a TSC clocksource, as much as the whole rest of a memory-store check): for
//!   limits that need finer than a millisecond, and `spillway serve`'s clock (a request
//!   there costs tens of µs; its decisions stay exact against wall time).
//! - [`ManualClock`] only moves when a test moves it.
//!
//! Every algorithm decides exactly against the time it is given, so its promise (never
//! more than the limit in any window) holds against the coarse clock's time; what a
//! coarse clock gives up is resolution against the wall: a window of the clock's time
//! may start or end up to a refresh (plus a scheduling delay) away from the wall's.
//!
//! [`Limiter`]: crate::Limiter

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::time::{Timestamp, micros};

/// A source of wall-clock time.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The OS wall clock, read on every call.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the OS clock
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp::from_micros(micros(since_epoch))
    }
}

/// A clock that tests set and advance by hand. Clones share the same time.
///
/// ```
/// use spillway_core::{Clock, ManualClock, Timestamp};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(Timestamp::from_secs(100));
/// let seen_by_limiter = clock.clone();
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(seen_by_limiter.now(), Timestamp::from_micros(101_500_000));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(start.as_micros())),
        }
    }

    /// Moves the clock `by` later.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(micros(by), Ordering::SeqCst);
    }

    /// Sets the clock to `to` (which may be earlier: clocks do jump back).
    pub fn set(&self, to: Timestamp) {
        self.now.store(to.as_micros(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.now.load(Ordering::SeqCst))
    }
}

/// A wall clock read with one atomic load, refreshed by a background thread every
/// `resolution`. Never goes backwards, even when the OS clock is stepped back.
///
/// The thread stops once every clone of the clock has been dropped.
#[derive(Clone, Debug)]
pub struct CoarseClock {
    now: Arc<AtomicU64>,
    resolution: Duration,
}

impl CoarseClock {
    /// The process's clock refreshed every millisecond: every call returns a handle to
    /// the same clock, refreshed by one thread (started on first use, running while
    /// the process does).
    pub fn new() -> Self {
        static SHARED: OnceLock<CoarseClock> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::with_resolution(Duration::from_millis(1)))
            .clone()
    }

    /// A clock of its own, refreshed every `resolution` (at least 10 µs) by a thread
    /// that stops once every clone of it has been dropped.
    pub fn with_resolution(resolution: Duration) -> Self {
        let resolution = resolution.max(Duration::from_micros(10));
        let now = Arc::new(AtomicU64::new(SystemClock.now().as_micros()));
        let weak: Weak<AtomicU64> = Arc::downgrade(&now);
        std::thread::Builder::new()
            .name("spillway-coarse-clock".into())
            .spawn(move || {
                while let Some(now) = weak.upgrade() {
                    now.fetch_max(SystemClock.now().as_micros(), Ordering::Relaxed);
                    drop(now);
                    std::thread::sleep(resolution);
                }
            })
            .expect("spawning the coarse clock thread");
        CoarseClock { now, resolution }
    }

    /// How often the clock is refreshed.
    pub fn resolution(&self) -> Duration {
        self.resolution
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.now.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_it() {
        let clock = ManualClock::new(Timestamp::from_micros(5));
        let other = clock.clone();
        assert_eq!(clock.now(), Timestamp::from_micros(5));
        other.advance(Duration::from_micros(7));
        assert_eq!(clock.now(), Timestamp::from_micros(12));
        clock.set(Timestamp::from_micros(3));
        assert_eq!(other.now(), Timestamp::from_micros(3));
    }

    #[test]
    fn coarse_clock_starts_at_the_system_time() {
        let before = SystemClock.now();
        let coarse = CoarseClock::new();
        let after = SystemClock.now();
        assert!(coarse.now() >= before && coarse.now() <= after);
    }
}
