//! The deny cache: a (key, limit) that the store denied a unit-cost request with
//! `retry_after = T` is answered here until T, without a store call.
//!
//! Why the answer is exact: a limit's room only grows with time and only shrinks with
//! charges, and a denial charges nothing (limits that charge denials, `count_rejected`,
//! are never cached; nor are `distinct` limits, whose denial is for a new member only).
//! So a request of the same cost is denied at every moment before T,
//! whatever else happens: other servers' charges make it more denied, never less. Its
//! decision before T is also known: `remaining` 0 (a unit did not fit), `retry_after`
//! and `reset_after` the stored ones less the time since. Only unit costs are cached:
//! for a larger cost `remaining` can grow before T, and the cache would report it stale.
//!
//! What can make room before T is a reset of the key or a larger limit: `forget` and
//! `clear` are called for those (a policy reload clears everything). A reset made by
//! another process is not seen here; its key stays denied at most until T.
//!
//! What can move T later is usage charged after the fact (`Request::usage`: never
//! answered here, and its charge forgets the entry), or a charge to the same state under
//! another limit of the same shape (the state is shared, the limits differ): through this store, the entry is
//! forgotten on every charge; through another process, the cached `retry_after` can be
//! shorter than the truth (the verdict, denied, still holds). The service's keys name
//! their rule, so no two of its limits share a state; same limit, other servers can't
//! charge a denied state.
//!
//! Memory is bounded in bytes: an entry costs [`ENTRY_BYTES`] and its key's text (a key
//! may be up to 1 KiB, and the cache keeps it alive); a full shard first drops what has
//! expired, then refuses new entries (the store answers them, as without a cache).
//!
//! The reference's local cache ([`DenyCache::answering_counted_denials`]): the Envoy
//! reference service caches a key over its limit until its window ends, so its counter
//! stops growing. Asked to, this cache does the same for fixed windows that count
//! rejected requests: their verdict is exact (a fixed window's count only grows until
//! the window ends, which is `retry_after`), only the denials it answers go uncounted,
//! as they do in the reference.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;

use crate::algorithm::Algorithm;
use crate::decision::{BatchDecision, Decision, Outcome};
use crate::key::Key;
use crate::limit::{Limit, Rejected, Shape};
use crate::store::Request;

/// Shards: a lock per shard, held for one lookup or insert.
const SHARDS: usize = 64;

/// Bytes one entry takes besides its key's text, as the size bound counts it: the map's
/// slot (key, limit identity, entry) and its control byte, rounded up.
pub const ENTRY_BYTES: usize = 96;

/// What an entry for `key` costs the bound.
fn entry_bytes(key: &Key) -> usize {
    ENTRY_BYTES + key.text_bytes()
}

/// What tells limits apart for the cache: everything a decision depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct LimitId {
    algorithm: Algorithm,
    limit: u64,
    window: u64,
    burst: u64,
    rejected: Rejected,
}

impl LimitId {
    fn of(limit: &Limit) -> LimitId {
        LimitId {
            algorithm: limit.algorithm(),
            limit: limit.limit(),
            window: limit.window_micros(),
            burst: limit.burst(),
            rejected: limit.rejected(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The limit that denied (another limit of the same shape shares the state, but
    /// decides differently).
    limit: LimitId,
    /// When a unit first fits again (µs).
    until: u64,
    /// When the state would be no state, if nothing more were charged (µs).
    reset_at: u64,
    capacity: u64,
}

/// One lock's entries, by key and the state's shape, and the bytes they cost.
#[derive(Debug, Default)]
struct Shard {
    map: HashMap<(Key, Shape), Entry>,
    bytes: usize,
}

impl Shard {
    fn remove(&mut self, slot: &(Key, Shape)) {
        if self.map.remove(slot).is_some() {
            self.bytes -= entry_bytes(&slot.0);
        }
    }

    /// Drops the entries that have expired by `now` (µs).
    fn expire(&mut self, now: u64) {
        let bytes = &mut self.bytes;
        self.map.retain(|(key, _), e| {
            let keep = e.until > now;
            if !keep {
                *bytes -= entry_bytes(key);
            }
            keep
        });
    }
}

/// Denials known to hold until a time (why they hold: the source of `deny_cache.rs`).
#[derive(Debug)]
pub struct DenyCache {
    shards: Box<[Mutex<Shard>]>,
    /// Bytes each shard may hold.
    per_shard: usize,
    hasher: RandomState,
    /// Also answer fixed windows that count rejected requests (the reference's cache).
    counted_denials: bool,
}

impl DenyCache {
    /// A cache of at most `bytes` (an entry costs `ENTRY_BYTES` and its key's text);
    /// `None` when that holds no entry at all.
    pub fn with_bytes(bytes: usize) -> Option<DenyCache> {
        let per_shard = bytes / SHARDS;
        (per_shard >= ENTRY_BYTES).then(|| DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard,
            hasher: RandomState::new(),
            counted_denials: false,
        })
    }

    /// Also answers fixed windows that count rejected requests until their window ends,
    /// as the Envoy reference's local cache (`LOCAL_CACHE_SIZE_IN_BYTES`) does: the
    /// denials answered here are not counted.
    pub fn answering_counted_denials(mut self, yes: bool) -> DenyCache {
        self.counted_denials = yes;
        self
    }

    /// Whether a denial of a request of `cost` against `limit` may be answered here.
    /// Not for a `count_rejected` limit (its denials must reach the store, to be
    /// charged) unless asked for fixed windows, nor for a `distinct` one (a denial is
    /// for a new member: a member already counted is still admitted), nor for a
    /// `concurrency` one (a hold given back frees a slot before any lapse, and a held
    /// id renews).
    fn cacheable(&self, limit: &Limit, cost: u64) -> bool {
        let counted = limit.count_rejected()
            && !(self.counted_denials && limit.algorithm() == Algorithm::FixedWindow);
        // A limit that lets requests wait admits some before their `retry_after`: the
        // store answers it.
        cost == 1 && !counted && !limit.algorithm().takes_member() && limit.max_wait().is_zero()
    }

    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// The decision on a unit-cost request at `now` (µs), if a cached denial covers it.
    pub fn get(&self, key: &Key, limit: &Limit, cost: u64, now: u64) -> Option<Decision> {
        if !self.cacheable(limit, cost) {
            return None;
        }
        let slot = (key.clone(), limit.shape());
        let mut shard = self.shard(key).lock();
        let entry = *shard.map.get(&slot)?;
        if now >= entry.until {
            shard.remove(&slot);
            return None;
        }
        if entry.limit != LimitId::of(limit) {
            return None;
        }
        Some(Decision {
            outcome: Outcome::Denied {
                retry_after: Duration::from_micros(entry.until - now),
            },
            limit: entry.capacity,
            remaining: 0,
            reset_after: Duration::from_micros(entry.reset_at.saturating_sub(now)),
            wait: std::time::Duration::ZERO,
            borrowed: false,
            queued: false,
        })
    }

    /// Remembers a store's `decision` on a request of `cost` at `now` (µs), when it is
    /// a denial the cache can answer (see the module docs).
    pub fn remember(&self, key: &Key, limit: &Limit, cost: u64, decision: &Decision, now: u64) {
        let Outcome::Denied { retry_after } = decision.outcome else {
            return;
        };
        if !self.cacheable(limit, cost) || retry_after.is_zero() {
            return;
        }
        let entry = Entry {
            limit: LimitId::of(limit),
            until: now.saturating_add(retry_after.as_micros() as u64),
            reset_at: now.saturating_add(decision.reset_after.as_micros() as u64),
            capacity: decision.limit,
        };
        let mut shard = self.shard(key).lock();
        let slot = (key.clone(), limit.shape());
        if let Some(held) = shard.map.get_mut(&slot) {
            *held = entry;
            return;
        }
        if shard.bytes + entry_bytes(key) > self.per_shard {
            shard.expire(now);
            if shard.bytes + entry_bytes(key) > self.per_shard {
                return;
            }
        }
        shard.bytes += entry_bytes(key);
        shard.map.insert(slot, entry);
    }

    /// Forgets what is cached for `key`'s state under `limit`: after a reset, and after
    /// a charge through this store (under another limit of the same shape, it moved the
    /// cached retry time later).
    pub fn forget(&self, key: &Key, limit: &Limit) {
        let mut shard = self.shard(key).lock();
        if !shard.map.is_empty() {
            shard.remove(&(key.clone(), limit.shape()));
        }
    }

    /// The decisions on `requests` at `now` (µs) when every one of them has a cached
    /// denial (a batch with one request the store would admit must go to the store: its
    /// decision is not known here).
    pub fn answer(&self, requests: &[Request<'_>], now: u64) -> Option<Vec<Decision>> {
        // Usage must reach the store: it is charged whatever the limit holds.
        if requests.iter().any(|r| r.usage) {
            return None;
        }
        (0..requests.len())
            .map(|i| {
                let r = &requests[i];
                // A cached denial was judged alone; beside a request on the same state
                // the store may judge it otherwise.
                (!shares_state(requests, i)).then(|| self.get(r.key, r.limit, r.cost, now))?
            })
            .collect()
    }

    /// Learns a store's answer to `requests` at `now` (µs): a charged state's entry is
    /// stale, a denial on its own is cached.
    pub fn learn(&self, requests: &[Request<'_>], batch: &BatchDecision, now: u64) {
        for (i, (r, d)) in requests.iter().zip(&batch.decisions).enumerate() {
            // Usage charged its state (moving a cached retry time later), and its
            // decision is a look's, not a unit's: nothing to remember.
            if r.usage {
                if r.cost > 0 {
                    self.forget(r.key, r.limit);
                }
                continue;
            }
            let charged = r.cost > 0 && (batch.allowed() || r.limit.charges_rejected(!d.allowed()));
            // A denial that counted (`count_rejected`) moved nothing but the count: a
            // fixed window denied until its end stays denied (`cacheable`).
            if charged && (d.allowed() || !self.cacheable(r.limit, r.cost)) {
                self.forget(r.key, r.limit);
                continue;
            }
            // A limit sharing its state with another request of the batch was judged
            // with that one's charge pending: its denial is not a fact about the state
            // alone (found by the property test).
            if !shares_state(requests, i) {
                self.remember(r.key, r.limit, r.cost, d, now);
            }
        }
    }

    /// Forgets everything (after a policy reload).
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            *shard.lock() = Shard::default();
        }
    }

    /// Entries held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Bytes held, as the bound counts them.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether another request of the batch is on `requests[i]`'s state (same key, same
/// shape).
fn shares_state(requests: &[Request<'_>], i: usize) -> bool {
    let r = &requests[i];
    requests
        .iter()
        .enumerate()
        .any(|(j, o)| j != i && o.key == r.key && o.limit.shape() == r.limit.shape())
}
