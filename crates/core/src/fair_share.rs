//! Fair shares of a rate among the clients that ask for it: what Envoy's Rate Limit
//! Quota Service hands each Envoy reporting a bucket (the server's `rlqs` module), and
//! the ledger that keeps the shares handed out within the rate however many replicas
//! hand them out at once.
//!
//! This file is the readable spec of `crates/redis/scripts/fair_share.lua`, function
//! for function: [`fair`] is its `fair`, [`Shares::grant`] its `grant`,
//! [`Shares::settle`] its `settle`, [`Shares::live`] its `holders`. The twins are tested against each other (`redis/tests/it/quota.rs`).
//!
//! - [`fair`]: a part of the rate ([`FLOOR`]) is split evenly, the rest max-min fair on
//!   demand (an Envoy asking for less than an even split of what is left gets what it
//!   asks; the others split the rest), and what nobody asks for is spread evenly, so an
//!   Envoy can grow until its next report. The shares add up to the rate, never more.
//! - [`Shares`]: one bucket's *holders*, each with its demand, the share booked for it and
//!   when that lapses. A grant gives the asking holder the least of its fair share and
//!   what the others' live bookings leave of the rate: the bookings never add up to
//!   more than the rate (after a rate is lowered, they shrink to it at each holder's
//!   next grant). Others shrink at their own grants, never at another's.
//! - [`token_bucket`]: a share as a token bucket Envoy 1.40 runs.

use std::collections::BTreeMap;

use crate::Timestamp;

mod grant;

pub use grant::{Ask, Granted, Holding, Shares};

/// The part of a bucket's rate every Envoy reporting it gets whatever its demand, split
/// evenly: an Envoy that was idle can admit its first requests before its next report
/// moves the shares.
pub const FLOOR: f64 = 0.1;

/// A share below this (requests a second) is none: a rounding's worth.
pub const TINY: f64 = 1e-9;

/// The longest `fill_interval` a share is written with: a share below one request in
/// this long is written as one request in this long at most (never more than the share).
pub const MAX_FILL_SECS: u64 = 3600;

/// How far below its share a token bucket's rate may be for the shortest interval to do.
pub const CLOSE: f64 = 0.05;

/// The share of `rate` (requests a second) of each client whose demand (requests a
/// second) is `demands[i]`, beside `headroom` more clients of no demand (room kept for
/// newcomers): `floor` of the rate split evenly among all, the rest max-min fair on
/// demand (the smallest demand first; ties in the order given), what is left over split
/// evenly among the clients that are there. The shares of `demands`, in order; with the
/// headroom's floors they add up to `rate`.
pub fn fair(rate: f64, floor: f64, demands: &[f64], headroom: usize) -> Vec<f64> {
    let n = demands.len();
    if n == 0 || rate <= 0.0 {
        return vec![0.0; n];
    }
    let each = rate * floor / (n + headroom) as f64;
    let mut shares = vec![each; n];
    let mut left = rate - each * (n + headroom) as f64;
    // Water-filling on what each asks beyond its floor, the smallest first.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]));
    for (k, &i) in order.iter().enumerate() {
        let even = left / (n - k) as f64;
        let more = (demands[i] - each).max(0.0).min(even);
        shares[i] += more;
        left -= more;
    }
    for share in &mut shares {
        *share += left / n as f64;
    }
    shares
}

/// A share as Envoy 1.40's token bucket takes it: `tokens` every `secs` seconds (whole
/// numbers both), never faster than `share` requests a second. The shortest interval
/// whose rate is within [`CLOSE`] of the share (a bucket holds one fill, so a shorter
/// interval is a smaller burst), else the closest over intervals up to a minute; a
/// share below one request a minute gets one request in as long as it takes, up to
/// [`MAX_FILL_SECS`]; `None` below even that (deny).
///
/// The burst (one fill) is therefore less than a second of the share plus 20 requests:
/// the interval before the one taken was more than 5% short, so it held less than 20
/// (`token_bucket(5.31)` is 21 every 4 s; 15 in 3 s would be 6% short).
pub fn token_bucket(share: f64) -> Option<(u32, u64)> {
    if share.is_nan() || share <= 0.0 {
        return None;
    }
    let mut best: Option<(u32, u64)> = None;
    let mut best_rate = 0.0;
    for secs in 1..=60u64 {
        let tokens = (share * secs as f64).floor().min(u32::MAX as f64);
        let rate = tokens / secs as f64;
        // Better by more than rounding: a longer interval only when it is closer.
        if tokens >= 1.0 && rate > best_rate + 1e-9 {
            best = Some((tokens as u32, secs));
            best_rate = rate;
            if rate >= share * (1.0 - CLOSE) {
                break;
            }
        }
    }
    best.or_else(|| {
        // (Less a rounding's worth: 1 / (1 / 90) is a hair above 90.)
        let secs = (1.0 / share * (1.0 - 1e-12)).ceil();
        (secs <= MAX_FILL_SECS as f64).then_some((1, secs as u64))
    })
}

/// One holder's booking: its demand, the share booked for it, when that lapses, and
/// the share it was last granted (what the booking comes down to once its Envoy has
/// it: [`Shares::settle`]).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Booking {
    demand: f64,
    share: f64,
    until: Timestamp,
    granted: f64,
}

/// The holders of one bucket, in name order (see [`Shares`]): the order the Lua twin
/// sorts them in.
type Holders = BTreeMap<String, Booking>;

#[cfg(test)]
mod tests;
