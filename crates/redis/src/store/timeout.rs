//! How long the store waits for Redis: a timeout that follows the round trips it
//! observes, between a floor and a ceiling; and a deadline that times Redis out for
//! its own silence, not for this process's stall.
//!
//! **The timeout** is TCP's retransmission timeout (RFC 6298): a smoothed round trip
//! plus four times its smoothed deviation, here kept between the store's `timeout`
//! (the floor) and its ceiling. On a Redis nearby (round trips of 0.1–2 ms) it stays at
//! the floor. A store whose round trips are slower and vary more (across a WAN, a
//! loaded server) raises it, up to the ceiling, instead of timing out a steady share
//! of its calls. A call that times out counts as a round trip of the timeout it had
//! (TCP doubles instead): a store slower than the floor would otherwise never be seen,
//! its every call cut short. After a fault the answered calls bring it back down.
//!
//! **The deadline.** A stall of this process (descheduled on a busy machine, a
//! virtual machine's stolen time, a runtime thread blocked) delays its timers and its
//! reads alike. When it ends, the deadline's timer and the socket holding Redis's reply
//! are ready at once, and the task waiting for the reply may run before the
//! connection's task has read it: a call Redis answered in a millisecond would fail.
//! So a timer that fired late moves the deadline on by as long as it was late (at most
//! the ceiling, [`STALLS`] times): the store is given the time this process lost.
//! Measured on 2 cores (docs/reliability.md, "Timeouts that fit the store"): the
//! process stopped for 40 ms every 5 s at 3,000 requests a second, 132 store timeouts
//! in a minute before, none after.

use std::time::Duration;

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::Instant;

/// A timer that fired later than this after its deadline fired late: this process
/// stalled. (Tokio's timers are kept to the millisecond; a busy runtime fires them a
/// little late.)
pub(crate) const STALLED: Duration = Duration::from_millis(2);

/// How many times one deadline moves on for a stall.
pub(crate) const STALLS: u32 = 3;

/// The store's timeout: the floor, the ceiling, and where it stands between them.
#[derive(Debug)]
pub(crate) struct Timeouts {
    floor: Duration,
    ceiling: Duration,
    /// The timeout now, in µs: read by every decision.
    current: AtomicU64,
    /// The smoothed round trip and its deviation, in µs (`None` before the first).
    estimate: Mutex<Option<Estimate>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Estimate {
    round_trip: f64,
    deviation: f64,
}

impl Timeouts {
    /// A timeout of `floor` until round trips say otherwise, never above `ceiling`
    /// (at least `floor`).
    pub(crate) fn new(floor: Duration, ceiling: Duration) -> Timeouts {
        Timeouts {
            floor,
            ceiling: ceiling.max(floor),
            current: AtomicU64::new(micros(floor)),
            estimate: Mutex::new(None),
        }
    }

    /// The timeout a call gets now.
    pub(crate) fn current(&self) -> Duration {
        Duration::from_micros(self.current.load(Ordering::Relaxed))
    }

    /// The most a call may get.
    pub(crate) fn ceiling(&self) -> Duration {
        self.ceiling
    }

    /// How long redis-rs waits for a reply before it gives up on its own: longer than
    /// any deadline of the store's, stalls included, so that the store's comes first.
    pub(crate) fn backstop(&self) -> Duration {
        self.ceiling * (STALLS + 2)
    }

    /// A call was answered after `round_trip`.
    pub(crate) fn answered(&self, round_trip: Duration) {
        self.observe(round_trip);
    }

    /// A call got no answer within `timeout`: its round trip was at least that.
    pub(crate) fn timed_out(&self, timeout: Duration) {
        self.observe(timeout);
    }

    fn observe(&self, round_trip: Duration) {
        let sample = round_trip.as_secs_f64() * 1e6;
        let mut estimate = self.estimate.lock();
        // RFC 6298, 2.2 and 2.3 (alpha 1/8, beta 1/4).
        let next = match *estimate {
            None => Estimate {
                round_trip: sample,
                deviation: sample / 2.0,
            },
            Some(e) => Estimate {
                deviation: 0.75 * e.deviation + 0.25 * (e.round_trip - sample).abs(),
                round_trip: 0.875 * e.round_trip + 0.125 * sample,
            },
        };
        *estimate = Some(next);
        let timeout = (next.round_trip + 4.0 * next.deviation) as u64;
        self.current.store(
            timeout.clamp(micros(self.floor), micros(self.ceiling)),
            Ordering::Relaxed,
        );
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `future`'s output if it comes by `deadline`, the deadline moved on by as long as
/// its timer fired late (at most `ceiling` a time, [`STALLS`] times; see the module's
/// notes); `None` if it does not.
pub(crate) async fn by<F: Future>(
    deadline: Instant,
    ceiling: Duration,
    future: F,
) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut deadline = deadline;
    for _ in 0..=STALLS {
        if let Ok(output) = tokio::time::timeout_at(deadline, future.as_mut()).await {
            return Some(output);
        }
        let now = Instant::now();
        let late = now.saturating_duration_since(deadline);
        if late < STALLED {
            return None;
        }
        deadline = now + late.min(ceiling);
    }
    None
}

#[cfg(test)]
mod tests;
