//! A bucket's ledger of shares: [`Shares::grant`] is `fair_share.lua`'s `grant`, step
//! for step.

use std::time::Duration;

use super::{Booking, Holders, TINY, fair};
use crate::Timestamp;

/// What a holder asks of a bucket at a report.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// The holder's name: unique among every replica's streams.
    pub holder: &'a str,
    /// Requests a second it reported, allowed and denied.
    pub demand: f64,
    /// The bucket's rate, requests a second.
    pub rate: f64,
    /// How long the booking lives unless granted again: the assignment's TTL and a grace
    /// for its delivery (an answer written later than that is not sent).
    pub ttl: Duration,
    /// The part of the rate split evenly among the holders ([`super::FLOOR`]).
    pub floor: f64,
    /// Holders of no demand whose floors are kept out of the fair shares: room kept for
    /// an Envoy that comes (its first share is granted at once, not when the others
    /// next report).
    pub headroom: u32,
    /// The holder whose Envoy this holder's is (its stream broke, and the Envoy came
    /// back on this one): its live share becomes this holder's.
    pub replaces: Option<&'a str>,
    /// The share the holder's Envoy runs now (the last one it was sent and read, while
    /// it lives; 0 if none): booked no lower until the new one is delivered, so that a
    /// decrease counts as the larger share until Envoy has it, and a grant whose answer
    /// never arrives leaves booked what Envoy runs.
    pub running: f64,
}

impl Ask<'_> {
    /// Whether the numbers are finite and at least 0 (and a TTL given): what both
    /// ledgers refuse otherwise.
    pub fn check(&self) -> Result<(), String> {
        let numbers = [self.demand, self.rate, self.floor, self.running];
        if numbers.iter().any(|n| !n.is_finite() || *n < 0.0) {
            return Err(format!(
                "a share's demand, rate, floor and running share must be finite and at \
                 least 0: {numbers:?}"
            ));
        }
        if self.holder.is_empty() || self.ttl < Duration::from_micros(1) {
            return Err("a grant needs a holder and a TTL".into());
        }
        Ok(())
    }
}

/// A grant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Granted {
    /// The holder's new share, requests a second: what it is sent.
    pub share: f64,
    /// The bucket's live bookings added up, the holder's with them.
    pub assigned: f64,
    /// How many hold the bucket, the holder with them.
    pub holders: u64,
    /// The holder had no live share and the others' live shares leave nothing of its
    /// fair one: it is booked with none. Its caller sends it nothing when the room may
    /// be held by a stream that broke (its Envoy keeps what it runs, maybe that very
    /// assignment), and otherwise its share of 0 until the others shrink.
    pub withheld: bool,
}

/// One live holder of a bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Holding {
    /// Its name, as its grants gave it.
    pub holder: String,
    /// Requests a second it last reported.
    pub demand: f64,
    /// The share booked for it, requests a second.
    pub share: f64,
    /// When its booking lapses.
    pub until: Timestamp,
}

/// One bucket's holders, kept in this process (the memory store's ledger; Redis keeps
/// the same in a hash per bucket).
#[derive(Clone, Debug, Default)]
pub struct Shares {
    holders: Holders,
}

impl Shares {
    /// Records `ask.holder`'s demand at `now` and books its share:
    ///
    /// 1. The holders lapsed by `now` are forgotten. The holder `ask.replaces` names
    ///    goes, its live share now this holder's (`had`: what this holder's Envoy may
    ///    run).
    /// 2. `fairly`: its [`fair`] share among the live holders' demands, beside
    ///    `ask.headroom` floors kept for newcomers.
    /// 3. Its share: the least of `fairly` and what the others' bookings leave of the
    ///    rate. When the bookings are over the rate (it was lowered), no less than the
    ///    least of `fairly` and `had`: never a denial for it, and the sum does not grow.
    /// 4. *Withheld* when the share is none while `fairly` is some and it had none.
    /// 5. Booked: the larger of the share and `ask.running`, until `now + ask.ttl`.
    pub fn grant(&mut self, ask: &Ask<'_>, now: Timestamp) -> Granted {
        self.forget(now);
        let mut had = self.holders.get(ask.holder).map_or(0.0, |b| b.share);
        if let Some(old) = ask.replaces.filter(|r| *r != ask.holder)
            && let Some(b) = self.holders.remove(old)
        {
            had = had.max(b.share);
        }
        // The others in name order (the Lua twin sorts `HGETALL`'s): a tie in demand
        // goes to the earlier one in `fair`, and sums add in one order in both.
        let others: Vec<&Booking> = (self.holders.iter())
            .filter(|(h, _)| *h != ask.holder)
            .map(|(_, b)| b)
            .collect();
        let booked_by_others: f64 = others.iter().map(|b| b.share).sum();
        let mut demands: Vec<f64> = others.iter().map(|b| b.demand).collect();
        demands.push(ask.demand);
        let mine = demands.len();
        let fairly = fair(ask.rate, ask.floor, &demands, ask.headroom as usize)[mine - 1];
        let mut share = fairly.min(ask.rate - booked_by_others).max(0.0);
        if booked_by_others + had > ask.rate + TINY {
            share = share.max(fairly.min(had));
        }
        if share < TINY {
            share = 0.0;
        }
        let withheld = share == 0.0 && fairly >= TINY && had < TINY;
        let booking = Booking {
            demand: ask.demand,
            share: share.max(ask.running),
            until: now.saturating_add(ask.ttl),
            granted: share,
        };
        match self.holders.get_mut(ask.holder) {
            Some(b) => *b = booking,
            None => {
                self.holders.insert(ask.holder.to_owned(), booking);
            }
        }
        Granted {
            share,
            assigned: booked_by_others + booking.share,
            holders: mine as u64,
            withheld,
        }
    }

    /// `holder`'s Envoy has taken an answer and runs `runs` from now on: its live
    /// booking comes down to the larger of that and what it was last granted (a grant
    /// made since the answer was sent may be larger). A decrease frees its room as soon
    /// as its Envoy has it, not at the holder's next grant. Never raises a booking.
    pub fn settle(&mut self, holder: &str, runs: f64, now: Timestamp) {
        if let Some(b) = self.holders.get_mut(holder).filter(|b| b.until > now) {
            b.share = b.share.min(b.granted.max(runs));
        }
    }

    /// The holders whose booking lives at `now`, by name.
    pub fn live(&self, now: Timestamp) -> Vec<Holding> {
        (self.holders.iter())
            .filter(|(_, b)| b.until > now)
            .map(|(h, b)| Holding {
                holder: h.clone(),
                demand: b.demand,
                share: b.share,
                until: b.until,
            })
            .collect()
    }

    /// Forgets the holders lapsed by `now`; whether none is left.
    pub fn forget(&mut self, now: Timestamp) -> bool {
        self.holders.retain(|_, b| b.until > now);
        self.holders.is_empty()
    }
}
