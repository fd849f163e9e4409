//! Sliding window counter: the window W is split into `precision` (P) sub-buckets of
//! `b = W / P` µs, aligned to the epoch, each holding a count. The window ending at
//! `now` (bucket `j`, offset `off` into it) covers buckets `j−P+1 ..= j` fully and the
//! oldest bucket `j−P` partly, for the fraction `(b − off) / b` of it. The `edge` mode
//! decides how that partial bucket counts:
//!
//! - `interpolate`: weighted by that fraction (P = 1 is Cloudflare's two-bucket
//!   estimate). Approximate in both directions.
//! - `strict`: whole. Counts every request of the last P+1 buckets, a superset of the
//!   window, so it never admits more than an exact sliding log (Figma: P = 60).
//! - `lenient`: not at all. Counts a subset of the window: never denies what a sliding
//!   log would admit, but may admit up to (P+1)/P × limit in a window.
//!
//! `interpolate` is computed in f64, in exactly this order, so that the Redis script
//! (Lua doubles) gets bit-identical answers:
//! `estimate = full + prev × ((b − off) / b)`; admitted iff `estimate + cost ≤ limit`;
//! `remaining = floor(limit − estimate)`. Every input is an integer below 2^53.
//!
//! State: a ring of P+1 counters, the index of the newest bucket written, and the
//! ring's total — 8 × (P+1) bytes on the heap plus 40 inline. The total makes a check
//! O(1) while requests keep landing in the current sub-bucket: only the bucket that
//! slid out of the window is subtracted. A check after a pause of k sub-buckets costs
//! O(min(k, P)).

use super::kind::Edge;
use super::meter::{Meter, allow, deny};
use crate::decision::Decision;

/// Counts of the last P+1 buckets, in a ring indexed by `bucket % (P+1)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Buckets {
    /// Empty until the first charge, then P+1 counters.
    counts: Vec<u64>,
    /// Index (`t / b`) of the newest bucket written; the ring holds `newest−P ..= newest`.
    newest: u64,
    /// Sum of the ring's counters.
    total: u64,
}

impl Buckets {
    pub(super) fn heap_bytes(&self) -> usize {
        self.counts.capacity() * std::mem::size_of::<u64>()
    }

    fn count(&self, bucket: u64) -> u64 {
        let n = self.counts.len() as u64;
        if n == 0 || bucket > self.newest || self.newest - bucket >= n {
            0
        } else {
            self.counts[(bucket % n) as usize]
        }
    }

    /// Sum of buckets `lo ..= hi` (only those still in the ring), walking the ring once.
    fn sum(&self, lo: u64, hi: u64) -> u64 {
        let n = self.counts.len() as u64;
        if n == 0 {
            return 0;
        }
        let lo = lo.max(self.newest.saturating_sub(n - 1));
        let hi = hi.min(self.newest);
        if lo > hi {
            return 0;
        }
        let mut i = (lo % n) as usize;
        let mut total = 0u64;
        for _ in lo..=hi {
            total = total.saturating_add(self.counts[i]);
            i = if i + 1 == self.counts.len() { 0 } else { i + 1 };
        }
        total
    }
}

/// A sliding window's parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    precision: u64,
    edge: Edge,
    /// Sub-bucket width in µs.
    width: u64,
    limit: u64,
}

impl Params {
    /// `limit` per `window` µs in `precision` sub-buckets (the window divides evenly:
    /// `Limit` checked it).
    pub(crate) fn new(limit: u64, window: u64, precision: u32, edge: Edge) -> Params {
        let precision = u64::from(precision);
        Params {
            precision,
            edge,
            width: window / precision,
            limit,
        }
    }

    /// Whether `cost` fits with `full` counted in the whole buckets and `prev` in the
    /// partial one, `off` µs into the current bucket.
    fn fits(&self, full: u64, prev: u64, off: u64, cost: u64) -> bool {
        match self.edge {
            Edge::Strict => full.saturating_add(prev).saturating_add(cost) <= self.limit,
            Edge::Lenient => full.saturating_add(cost) <= self.limit,
            Edge::Interpolate => self.estimate(full, prev, off) + cost as f64 <= self.limit as f64,
        }
    }

    fn estimate(&self, full: u64, prev: u64, off: u64) -> f64 {
        full as f64 + prev as f64 * ((self.width - off) as f64 / self.width as f64)
    }

    fn remaining(&self, full: u64, prev: u64, off: u64) -> u64 {
        match self.edge {
            Edge::Strict => self.limit.saturating_sub(full.saturating_add(prev)),
            Edge::Lenient => self.limit.saturating_sub(full),
            Edge::Interpolate => (self.limit as f64 - self.estimate(full, prev, off))
                .floor()
                .max(0.0) as u64,
        }
    }

    /// `(full, prev)` for bucket `j ≥ newest`: the sum of `j−P+1 ..= j`, and bucket `j−P`.
    fn window(&self, s: &Buckets, j: u64) -> (u64, u64) {
        let Some(oldest) = j.checked_sub(self.precision) else {
            return (s.total, 0); // the whole ring lies in j−P+1 ..= j
        };
        // Buckets up to `oldest` have left the full range: take them off the total.
        let gone = if oldest >= s.newest {
            s.total
        } else {
            s.sum(0, oldest)
        };
        (s.total.saturating_sub(gone), s.count(oldest))
    }

    /// When the newest count stops counting, if nothing more is charged.
    fn idle_at_bucket(&self, newest: u64) -> u64 {
        (newest + self.precision + 1).saturating_mul(self.width)
    }
}

/// `now`, never before the newest bucket written.
fn clamp(p: &Params, s: &Buckets, now: u64) -> u64 {
    if s.counts.is_empty() {
        now
    } else {
        now.max(s.newest * p.width)
    }
}

impl Meter for Params {
    type State = Buckets;

    fn check(&self, s: &Buckets, now: u64, cost: u64, _member: &[u8]) -> Decision {
        let p = self;
        let now = clamp(p, s, now);
        let (j, off) = (now / p.width, now % p.width);
        let (full, prev) = p.window(s, j);
        let charged = !s.counts.is_empty() && (full > 0 || prev > 0);
        if cost <= p.limit && p.fits(full, prev, off, cost) {
            let reset = if cost > 0 || charged {
                p.idle_at_bucket(if cost > 0 { j } else { s.newest }) - now
            } else {
                0
            };
            return allow(p.limit, p.remaining(full + cost, prev, off), reset);
        }
        let reset = if charged {
            p.idle_at_bucket(s.newest) - now
        } else {
            0
        };
        let retry = if cost <= p.limit {
            retry_at(p, s, j, off, full, prev, cost) - now
        } else {
            0
        };
        deny(p.limit, cost, retry, p.remaining(full, prev, off), reset)
    }

    fn commit(&self, s: &mut Buckets, now: u64, cost: u64, _admitted: bool, _member: &[u8]) {
        if cost == 0 {
            return;
        }
        let p = self;
        let now = clamp(p, s, now);
        let j = now / p.width;
        let n = p.precision + 1;
        if s.counts.is_empty() {
            s.counts = vec![0; n as usize];
            s.newest = j;
        }
        if j > s.newest {
            // Buckets newest+1 ..= j reuse the slots of buckets that have left the ring.
            if j - s.newest >= n {
                s.counts.fill(0);
                s.total = 0;
            } else {
                for m in s.newest + 1..=j {
                    let slot = &mut s.counts[(m % n) as usize];
                    s.total = s.total.saturating_sub(*slot);
                    *slot = 0;
                }
            }
            s.newest = j;
        }
        let slot = &mut s.counts[(j % n) as usize];
        *slot = slot.saturating_add(cost);
        s.total = s.total.saturating_add(cost);
    }

    fn idle_at(&self, s: &Buckets) -> u64 {
        if s.total == 0 {
            0
        } else {
            self.idle_at_bucket(s.newest)
        }
    }
}

/// The first time at or after bucket `j` + `off` when `cost` fits, nothing else
/// charged. Walks forward bucket by bucket (at most P+1: by then every count has left
/// the window) keeping `full` and `prev` up to date in O(1) per step.
fn retry_at(
    p: &Params,
    s: &Buckets,
    mut j: u64,
    mut off: u64,
    mut full: u64,
    mut prev: u64,
    cost: u64,
) -> u64 {
    loop {
        if p.fits(full, prev, off, cost) {
            return j * p.width + off;
        }
        // Interpolate: the partial bucket's weight falls as `off` grows, so the fit may
        // come inside this bucket. `fits` is monotone in `off`: binary search it, on the
        // very predicate `check` uses, so the answer is exact even in floating point.
        if p.edge == Edge::Interpolate && p.fits(full, prev, p.width - 1, cost) {
            let (mut no, mut yes) = (off, p.width - 1);
            while yes - no > 1 {
                let mid = no + (yes - no) / 2;
                if p.fits(full, prev, mid, cost) {
                    yes = mid
                } else {
                    no = mid
                }
            }
            return j * p.width + yes;
        }
        // Next bucket: j−P+1 becomes the partial one, j+1 enters (empty: j ≥ newest).
        j += 1;
        off = 0;
        prev = j.checked_sub(p.precision).map_or(0, |m| s.count(m));
        full = full.saturating_sub(prev).saturating_add(s.count(j));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running total must give the same window as summing the ring, whatever the
    /// gaps between charges (same bucket, next bucket, past the whole ring).
    #[test]
    fn running_total_matches_a_full_sum() {
        for precision in [1u32, 3, 60] {
            let p = Params::new(1_000_000, 60_000_000, precision, Edge::Strict);
            let mut s = Buckets::default();
            let mut now = 1_702_080_000_000_000u64;
            let mut x = 12345u64;
            for step in 0..5_000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                now += match x >> 61 {
                    0..=3 => (x >> 20) % p.width,
                    4..=6 => (x >> 20) % (p.width * p.precision * 2),
                    _ => p.width * (p.precision + 2),
                };
                p.commit(&mut s, now, 1 + step % 5, true, &[]);
                let j = now / p.width;
                let naive_full = s.sum(j.saturating_sub(p.precision - 1), j);
                let naive_prev = j.checked_sub(p.precision).map_or(0, |m| s.count(m));
                assert_eq!(
                    p.window(&s, j),
                    (naive_full, naive_prev),
                    "precision {precision} step {step}"
                );
                assert_eq!(s.total, s.counts.iter().sum::<u64>());
            }
        }
    }
}
