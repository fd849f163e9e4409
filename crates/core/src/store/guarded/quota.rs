//! This server's share of a fixed-window limit: a quota lease, or a count kept in step
//! with the store by batched sync (see [`Sharing`](crate::Sharing)).
//!
//! Every entry lives for one window, by this server's clock: it ends `reset_after`
//! after the request that learned it was *sent* (the store read its time after that,
//! so the entry ends no later than the store's window). A lease's unspent units and a
//! sync's unflushed hits go with it:
//!
//! - **Lease**: units the store has already counted in this window; spending them in
//!   the same window admits nothing the store did not. Unspent units are lost (giving
//!   them back would take a call, and the window's count would still have refused
//!   others meanwhile): at most `units − 1` per server per window.
//! - **Sync**: `known` is the window's count at the store when this server last heard
//!   (a lower bound of the truth, which only grows within a window), `pending` the hits
//!   admitted here since, `flushing` those on their way to the store. A request is
//!   admitted while `known + pending + flushing + cost ≤ limit`, and denied otherwise
//!   (certainly: the true count is at least that). Each entry is flushed at the last
//!   [`MIN_SYNC`](crate::sharing::MIN_SYNC) tick before its interval `every` is up, and
//!   answers only while it heard from the store less than `every` ago (else the exact
//!   path decides: a store outage does not leave servers counting alone). What a
//!   server cannot see when it admits at `x` is the hits the others admitted since
//!   their last flush before it last heard — after `x − 2 × every` — and, if it took the
//!   exact path because its entry went stale, its own unflushed ones: the
//!   over-admission in a window is at most what the servers admit in `2 × every`.
//!
//! Memory is bounded in bytes ([`DEFAULT_SHARE_BYTES`] for the leases and as much for
//! the sync counts, or what [`GuardedStore::share_bytes`](crate::GuardedStore::share_bytes)
//! says), counting each entry at its largest (a key of 1 KiB); past it, new keys take
//! the exact path. The flush ticker walks the sync counts every 10 ms, so the bound also
//! bounds that walk.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;

use crate::decision::{BatchDecision, Decision, Outcome};
use crate::key::Key;
use crate::limit::{Limit, Shape};
use crate::sharing::Sharing;
use crate::store::Request;

use super::Guard;

mod learn;
mod upkeep;

const SHARDS: usize = 64;

/// The flush ticker's period (µs): a count is flushed at the last tick before its
/// interval is up, so it is never older than its interval.
const TICK: u64 = crate::sharing::MIN_SYNC.as_micros() as u64;

/// How long a lease request is waited for before another may be sent (µs): longer
/// than any store timeout; a request dropped in flight must not block leases for good.
const ASK_TIMEOUT: u64 = 1_000_000;

/// The bytes each table (leases, sync counts) may hold by default: 64 MiB.
pub const DEFAULT_SHARE_BYTES: usize = 64 << 20;

/// What an entry costs the bound, at its largest: its slot and a key of 1 KiB.
const WORST_ENTRY_BYTES: usize =
    std::mem::size_of::<((Key, Shape), Entry)>() + 1 + crate::key::MAX_KEY_LEN;

#[derive(Debug)]
enum Entry {
    Lease {
        /// Units left to spend.
        units: u64,
        /// `remaining` in the store's last reply: how much a new lease may ask for.
        hint: u64,
        /// The window's end (µs).
        until: u64,
        /// When this server sent its lease request still unanswered (µs; 0 = none):
        /// meanwhile others ask for their own cost only, or concurrent requests would
        /// each take a lease and strand their spare units.
        asking: u64,
    },
    Sync {
        known: u64,
        pending: u64,
        flushing: u64,
        until: u64,
        /// When the store last answered for this key (µs).
        heard: u64,
        /// Whether this server decided on the key since it last flushed: an idle key
        /// is not flushed (its entry goes stale; its next request takes the exact path).
        active: bool,
        every: u64,
        /// The limit, charging rejected hits too: a flush adds hits already admitted.
        flush: Limit,
        key: Key,
    },
}

impl Entry {
    fn until(&self) -> u64 {
        match self {
            Entry::Lease { until, .. } | Entry::Sync { until, .. } => *until,
        }
    }
}

/// One lock's entries, by key and the state's shape.
type Shard = HashMap<(Key, Shape), Entry>;

/// The leases and sync counts of one server. See the [module docs](self).
#[derive(Debug)]
pub(super) struct Quotas {
    /// Leases and sync counts apart: the flush ticker walks only the sync counts.
    leases: Box<[Mutex<Shard>]>,
    syncs: Box<[Mutex<Shard>]>,
    /// When expired leases were last dropped (µs).
    pruned: std::sync::atomic::AtomicU64,
    hasher: RandomState,
    /// Entries each shard may hold.
    per_shard: usize,
}

impl Quotas {
    /// Tables of at most `bytes` each.
    pub fn new(bytes: usize) -> Quotas {
        Quotas {
            per_shard: bytes / SHARDS / WORST_ENTRY_BYTES,
            leases: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            syncs: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            pruned: std::sync::atomic::AtomicU64::new(0),
            hasher: RandomState::new(),
        }
    }

    /// `key`'s shard of the sync counts (`sync`) or of the leases.
    fn shard(&self, key: &Key, sync: bool) -> &Mutex<Shard> {
        let shards = if sync { &self.syncs } else { &self.leases };
        &shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// Decides `requests` here when every one of them is shared and can be: spends the
    /// lease units or counts the hits. Otherwise takes nothing (`None`: the store decides).
    pub fn answer(
        &self,
        requests: &[Request<'_>],
        guards: &[Guard],
        now: u64,
    ) -> Option<BatchDecision> {
        let mut decisions = Vec::with_capacity(requests.len());
        let mut denied_by = None;
        let mut taken = 0;
        for (i, (r, g)) in requests.iter().zip(guards).enumerate() {
            let Some(d) = self.take(r, g.sharing, now) else {
                break;
            };
            if d.allowed() {
                taken = i + 1;
            } else {
                denied_by = Some(i);
            }
            decisions.push(d);
            if denied_by.is_some() {
                break;
            }
        }
        // `None` below gives back what was taken: a request after a denial here was not
        // judged, and its decision is the store's to give (the batch is denied anyway).
        let complete = decisions.len() == requests.len();
        if denied_by.is_some() || !complete {
            for (r, g) in requests[..taken].iter().zip(guards) {
                self.give_back(r, g.sharing);
            }
        }
        complete.then_some(BatchDecision {
            decisions,
            denied_by,
            lapsed: Vec::new(),
            alerts: Vec::new(),
        })
    }

    /// What to ask the store for, request by request: a lease's size (no more than the
    /// store last said remained, and only one lease request per key at a time), else
    /// the cost.
    pub fn asks(&self, requests: &[Request<'_>], guards: &[Guard], now: u64) -> Vec<u64> {
        requests
            .iter()
            .zip(guards)
            .map(|(r, g)| self.ask(r, g.sharing, now))
            .collect()
    }

    /// One request decided here: spent from a lease or counted by sync; `None` when
    /// only the store can tell.
    fn take(&self, r: &Request<'_>, sharing: Sharing, now: u64) -> Option<Decision> {
        if !sharing.is_shared() {
            return None;
        }
        let sync = matches!(sharing, Sharing::Sync { .. });
        let mut shard = self.shard(r.key, sync).lock();
        let entry = shard.get_mut(&(r.key.clone(), r.limit.shape()))?;
        if now >= entry.until() {
            return None;
        }
        let capacity = r.limit.capacity();
        match entry {
            Entry::Lease {
                units, hint, until, ..
            } => {
                if *units < r.cost {
                    return None;
                }
                *units -= r.cost;
                Some(allowed(capacity, *hint + *units, *until - now))
            }
            Entry::Sync {
                known,
                pending,
                flushing,
                until,
                heard,
                every,
                active,
                ..
            } => {
                if now >= heard.saturating_add(*every) {
                    return None;
                }
                *active = true;
                let used = *known + *pending + *flushing;
                let reset_after = Duration::from_micros(*until - now);
                if used + r.cost <= r.limit.limit() {
                    *pending += r.cost;
                    Some(allowed(capacity, capacity - used - r.cost, *until - now))
                } else if r.cost > capacity {
                    Some(Decision {
                        outcome: Outcome::CostExceedsCapacity,
                        limit: capacity,
                        remaining: capacity.saturating_sub(used),
                        reset_after,
                        wait: Duration::ZERO,
                        borrowed: false,
                        queued: false,
                    })
                } else {
                    Some(Decision {
                        outcome: Outcome::Denied {
                            retry_after: reset_after,
                        },
                        limit: capacity,
                        remaining: capacity.saturating_sub(used),
                        reset_after,
                        wait: Duration::ZERO,
                        borrowed: false,
                        queued: false,
                    })
                }
            }
        }
    }

    fn give_back(&self, r: &Request<'_>, sharing: Sharing) {
        if !sharing.is_shared() {
            return;
        }
        let sync = matches!(sharing, Sharing::Sync { .. });
        let mut shard = self.shard(r.key, sync).lock();
        match shard.get_mut(&(r.key.clone(), r.limit.shape())) {
            Some(Entry::Lease { units, .. }) => *units += r.cost,
            Some(Entry::Sync { pending, .. }) => *pending -= r.cost,
            None => {}
        }
    }

    /// What to ask the store for: a lease's full size (as much as the store had left
    /// when it last said), else the cost.
    fn ask(&self, r: &Request<'_>, sharing: Sharing, now: u64) -> u64 {
        let Sharing::Lease { units: size } = sharing else {
            return r.cost;
        };
        let mut shard = self.shard(r.key, false).lock();
        let slot = (r.key.clone(), r.limit.shape());
        let room = shard.len() < self.per_shard;
        let hint = match shard.get_mut(&slot) {
            Some(Entry::Lease { asking, .. }) if *asking != 0 && now < *asking + ASK_TIMEOUT => {
                return r.cost;
            }
            Some(Entry::Lease {
                hint,
                until,
                asking,
                ..
            }) => {
                *asking = now.max(1);
                if now < *until { *hint } else { size }
            }
            _ if room => {
                shard.insert(
                    slot,
                    Entry::Lease {
                        units: 0,
                        hint: size,
                        until: 0,
                        asking: now.max(1),
                    },
                );
                size
            }
            _ => size,
        };
        r.cost.max(size.min(hint))
    }
}

fn allowed(capacity: u64, remaining: u64, reset_after: u64) -> Decision {
    Decision {
        outcome: Outcome::Allowed,
        limit: capacity,
        remaining: remaining.min(capacity),
        reset_after: Duration::from_micros(reset_after),
        wait: std::time::Duration::ZERO,
        borrowed: false,
        queued: false,
    }
}
