//! Calls and failures over a sliding window, without a lock: two fixed windows, the
//! previous one weighted by how much of it the sliding window still covers (the
//! sliding window counter's estimate). A call adds to its window's count with one atomic
//! add; the first call of a new window claims the older slot and empties it. Counts
//! racing that claim may be lost or land a window early: a breaker needs a ratio, not
//! an exact count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::Timestamp;

/// One call, in a slot's packed count (calls in the high half, failures in the low).
const CALL: u64 = 1 << 32;
const FAILURE: u64 = 1;

#[derive(Debug)]
pub(super) struct Tally {
    window_us: u64,
    slots: [Slot; 2],
}

#[derive(Debug, Default)]
struct Slot {
    /// Which window the count is of (`now / window`), plus one: 0 is "never used".
    window: AtomicU64,
    counts: AtomicU64,
}

/// Calls and failures in the sliding window, the older window's part estimated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Counts {
    pub calls: f64,
    pub failures: f64,
}

impl Tally {
    pub(super) fn new(window: Duration) -> Tally {
        let window_us = u64::try_from(window.as_micros()).unwrap_or(u64::MAX).max(1);
        Tally {
            window_us,
            slots: Default::default(),
        }
    }

    /// The window, to the microsecond.
    pub(super) fn window(&self) -> Duration {
        Duration::from_micros(self.window_us)
    }

    /// Counts one call at `now`, failed or not, and returns the window's counts with it.
    pub(super) fn add(&self, now: Timestamp, failed: bool) -> Counts {
        let us = now.as_micros();
        let window = us / self.window_us + 1;
        let slot = &self.slots[(window % 2) as usize];
        let seen = slot.window.load(Ordering::Acquire);
        if seen != window
            && slot
                .window
                .compare_exchange(seen, window, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            slot.counts.store(0, Ordering::Release);
        }
        let add = if failed { CALL | FAILURE } else { CALL };
        let current = slot.counts.fetch_add(add, Ordering::AcqRel) + add;
        let older = &self.slots[((window + 1) % 2) as usize];
        let previous = if older.window.load(Ordering::Acquire) == window - 1 {
            older.counts.load(Ordering::Acquire)
        } else {
            0
        };
        // How much of the previous window the sliding window still covers.
        let weight = 1.0 - (us % self.window_us) as f64 / self.window_us as f64;
        let (calls, failures) = (|c: u64| (c >> 32) as f64, |c: u64| (c & 0xffff_ffff) as f64);
        Counts {
            calls: calls(current) + weight * calls(previous),
            failures: failures(current) + weight * failures(previous),
        }
    }

    /// Forgets every count (the store answered again after the breaker opened).
    pub(super) fn clear(&self) {
        for slot in &self.slots {
            slot.window.store(0, Ordering::Release);
            slot.counts.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_micros(10_000_000 + ms * 1000)
    }

    #[test]
    fn counts_the_window_and_weighs_the_one_before() {
        let t = Tally::new(Duration::from_secs(1));
        for _ in 0..9 {
            t.add(at(0), false);
        }
        assert_eq!(
            t.add(at(500), true),
            Counts {
                calls: 10.0,
                failures: 1.0
            }
        );
        // Half-way through the next window, half of the previous one still counts.
        let c = t.add(at(1500), true);
        assert_eq!((c.calls, c.failures), (6.0, 1.5));
        // Two windows on, nothing before counts.
        let c = t.add(at(3000), false);
        assert_eq!((c.calls, c.failures), (1.0, 0.0));
        t.clear();
        assert_eq!(t.add(at(3000), true).calls, 1.0);
    }

    #[test]
    fn threads_adding_at_once_lose_nothing_within_a_window() {
        let t = std::sync::Arc::new(Tally::new(Duration::from_secs(60)));
        // The window's slot claimed first: counts racing a claim may be lost.
        t.add(at(0), false);
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let t = std::sync::Arc::clone(&t);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        t.add(at(0), i == 0);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let c = t.add(at(0), false);
        assert_eq!((c.calls, c.failures), (40_002.0, 10_000.0));
    }
}
