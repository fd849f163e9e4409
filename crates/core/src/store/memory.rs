//! `MemoryStore`: limit state in this process. Sharded, bounded, atomic per batch.
//!
//! Layout: cache-padded shards (by default four per CPU, and at least one per 4,096
//! keys of the bound: 256 for a million; see `builder`), each a lock over a
//! `hashbrown::HashTable` of 24-byte entries, one per key: the key (one pointer), its
//! last use, and its state inline when it has one state of a fixed-size algorithm
//! whose numbers fit, else an index to its states out of line (see `table`). A key is
//! hashed once (SipHash with a random seed: keys are attacker-chosen, so the hasher
//! must resist collision floods); bits from 32 up pick the shard, the table uses the
//! low bits and the top seven.
//!
//! Why not `dashmap`: a batch must hold the locks of every shard it touches at once,
//! taken in one global order (ascending shard index) so that two batches sharing keys
//! in different orders cannot deadlock. dashmap's safe API locks one entry at a time,
//! and its raw shard API is an unsafe `RawTable`. A single request takes one lock.
//!
//! Why a spin lock (`spin`'s, yielding to the scheduler while it waits) rather than
//! `parking_lot`'s mutex: a shard is held for tens of nanoseconds, and a parking mutex's
//! unlock is a locked compare-exchange (it must see whether a thread is parked), which
//! measured a third of a check on a hot key; the spin lock's unlock is a plain store
//! (30.6 → 26.6 ns a check). The longest holds are a batch (at most 64 requests), a
//! sweep and an eviction round, each over one shard.
//!
//! Bounds: at most `max_keys` keys (rounded down to a multiple of the shard count),
//! `max_keys / shards` per shard, and at most `max_bytes` bytes (entries, key texts and
//! states), `max_bytes / shards` per shard. Inserting into a shard full in either first
//! drops the entries whose state has expired; while that is not enough, it evicts the
//! least recently used sixteenth of the shard (at least one), chosen exactly by order of
//! last use. Eviction forgets a
//! key's counts, so size `max_keys` above the number of keys active within one window:
//! under a flood of new keys (IP floods) the store stays within its bound and sheds
//! the coldest keys. Every shard also drops expired entries on an insert at most once
//! per `sweep_interval`, once a sixteenth of its entries are new since its last sweep
//! (a sweep reads them all); [`MemoryStore::purge_expired`] sweeps every shard on demand.

use std::sync::Arc;

use spin::mutex::SpinMutexGuard as MutexGuard;

/// See the module docs.
type Mutex<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;

mod batch;
mod builder;
mod hash;
mod table;

pub use self::builder::{DEFAULT_MAX_BYTES, MemoryStoreBuilder};
pub use self::hash::{HashKeys, KeyHash, Rehash};

use arcstr::ArcStr;

use self::batch::Locked;
use self::table::{Entry, Table};
use super::records::OpenRecords;
use super::round;
use super::{Request, Store, validate, validate_one};
use crate::algorithm::State;
use crate::{BatchDecision, Decision, Error, Key, Limit, Timestamp};

/// Rate limit state in this process; cheap to clone, clones share the state.
///
/// ```
/// use spillway_core::{Algorithm, Key, Limit, MemoryStore, Request, Timestamp};
/// use std::time::Duration;
///
/// let store = MemoryStore::builder().max_keys(100_000).build();
/// let limit = Limit::new(Algorithm::SlidingLog, 2, Duration::from_secs(1)).unwrap();
/// let key = Key::new("user:1").unwrap();
/// let now = Timestamp::from_secs(1_700_000_000);
/// for expected in [true, true, false] {
///     let d = store.decide_one(Request::new(&key, &limit, 1), now).unwrap();
///     assert_eq!(d.allowed(), expected);
/// }
/// ```
#[derive(Debug)]
pub struct MemoryStore<H = KeyHash> {
    inner: Arc<Inner<H>>,
}

impl<H> Clone for MemoryStore<H> {
    fn clone(&self) -> Self {
        MemoryStore {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[derive(Debug)]
struct Inner<H> {
    shards: Box<[Shard]>,
    hasher: H,
    per_shard: usize,
    per_shard_bytes: usize,
    sweep_interval: u64,
    /// Records kept beside the limits (reservations): see [`Records`].
    records: OpenRecords,
}

/// One shard, on its own cache lines so that two cores locking neighbours don't
/// contend for the same line.
#[derive(Debug)]
#[repr(align(128))]
struct Shard(Mutex<Table>);

impl<H: HashKeys> MemoryStore<H> {
    /// The records this store keeps beside its limits (`Records`, in `records.rs`).
    pub(crate) fn records(&self) -> &OpenRecords {
        &self.inner.records
    }

    /// The most bytes this store holds (a shard may pass its share by one key's state
    /// growing in place, until its next insert makes room).
    pub fn max_bytes(&self) -> usize {
        self.inner.per_shard_bytes * self.inner.shards.len()
    }

    /// Bytes held now: entries, key texts and states.
    pub fn bytes(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).bytes()).sum()
    }

    /// The most keys this store holds.
    pub fn max_keys(&self) -> usize {
        self.inner.per_shard * self.inner.shards.len()
    }

    /// Keys held now (including expired ones not yet swept).
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| lock(s).entries.len())
            .sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `key` occupies in the store: its entry, the key text and every limit
    /// state it holds out of line (see the module docs). `None` when the key holds no
    /// state.
    pub fn footprint(&self, key: &Key) -> Option<usize> {
        let hash = self.inner.hash(key);
        let table = lock(self.inner.shard(hash));
        let e = table.entries.find(hash, |e| key.is(&e.key))?;
        Some(std::mem::size_of::<Entry>() + key.text_bytes() + e.spilled_bytes(&table.spills))
    }

    /// A copy of `key`'s state for `limit`'s shape, as it stands (`explain` reads a
    /// `shares` tree with it); `None` when the key holds none.
    pub fn state(&self, key: &Key, limit: &Limit) -> Option<State> {
        let hash = self.inner.hash(key);
        let table = lock(self.inner.shard(hash));
        let e = table.entries.find(hash, |e| key.is(&e.key))?;
        e.state(limit.shape(), &table.spills)
    }

    /// Drops every key whose state has expired by `now`; returns how many.
    pub fn purge_expired(&self, now: Timestamp) -> usize {
        let now = now.as_micros();
        self.inner.shards.iter().map(|s| lock(s).purge(now)).sum()
    }

    /// Decides one request: one shard lock, no allocation for a known key whose state
    /// is inline.
    pub fn decide_one(&self, r: Request<'_>, now: Timestamp) -> Result<Decision, Error> {
        validate_one(&r)?;
        let hash = self.inner.hash(r.key);
        let found = |text: &ArcStr| r.key.is(text);
        let at = (r.limit, r.cost, r.member_bytes(), now, (r.usage, r.refund));
        Ok(self.decide_at(hash, found, || r.key.clone(), at))
    }

    /// [`decide_one`](MemoryStore::decide_one) for the key `Key::joined(parts)`, which
    /// is built only when the key is new: a known key is found by its text joined on
    /// the stack (up to 256 bytes; a longer one is built as usual). For a middleware
    /// that makes its key from each request (`spillway-tower`): a known key costs no
    /// allocation.
    pub fn decide_joined(
        &self,
        parts: &[&str],
        limit: &Limit,
        cost: u64,
        now: Timestamp,
    ) -> Result<Decision, Error> {
        let mut buf = [0u8; JOINED_ON_STACK];
        let text = match crate::key::join_on(&mut buf, parts) {
            Some(text) if !limit.algorithm().takes_member() => text,
            // Too long for the stack, not a valid key, or a limit that needs a member:
            // as `decide_one` decides (or refuses) it.
            _ => {
                let key = Key::joined(parts)?;
                return self.decide_one(Request::new(&key, limit, cost), now);
            }
        };
        super::validate_cost(cost)?;
        let hash = self.inner.hasher.hash_text(text);
        let found = |stored: &ArcStr| stored.as_str() == text;
        let key = || Key::joined(parts).expect("join_on checked its length");
        Ok(self.decide_at(hash, found, key, (limit, cost, &[][..], now, (false, None))))
    }

    /// One request on the key hashed `hash`, found by `found` (and made by `key` if it
    /// must be inserted), at `limit`, `cost`, `member`, `now`; `usage`: charged in full
    /// (a [`Request::usage`](Request#structfield.usage)), or given back (`refund`).
    #[inline]
    fn decide_at(
        &self,
        hash: u64,
        found: impl Fn(&ArcStr) -> bool,
        key: impl FnOnce() -> Key,
        (limit, cost, member, now, charge): (
            &Limit,
            u64,
            &[u8],
            Timestamp,
            (bool, Option<Timestamp>),
        ),
    ) -> Decision {
        let decide = |state: &mut State| match charge {
            (_, Some(at)) => {
                let (decision, idle) = limit.give_back(state, now, cost, at, member);
                (decision, Some(idle))
            }
            (true, None) => limit.decide_usage_of(state, now, cost, member),
            (false, None) => limit.decide(state, now, cost, member),
        };
        let mut guard = lock(self.inner.shard(hash));
        let used = guard.tick();
        let table = &mut *guard;
        let shape = limit.shape();
        if let Some(e) = table.entries.find_mut(hash, |e| found(&e.key)) {
            e.used = used;
            if e.holds_inline(shape) {
                let mut state = e.load(shape);
                let (decision, idle) = decide(&mut state);
                if let Some(idle) = idle {
                    e.put(shape, state, idle.as_micros(), &mut table.spills);
                }
                return decision;
            }
            let taken = e.take(shape, &mut table.spills);
            let had = taken.is_some();
            let mut state = taken.unwrap_or_default();
            let (decision, idle) = decide(&mut state);
            if had || idle.is_some() {
                let idle = idle.map_or(0, Timestamp::as_micros);
                e.put(shape, state, idle, &mut table.spills);
            }
            return decision;
        }
        let mut state = State::empty();
        let (decision, idle) = decide(&mut state);
        if let Some(idle) = idle {
            let us = now.as_micros();
            table.insert(
                &self.inner,
                &key(),
                hash,
                shape,
                state,
                idle.as_micros(),
                us,
            );
        }
        decision
    }

    /// Decides a batch all or nothing, holding every shard it touches.
    pub fn decide(&self, requests: &[Request<'_>], now: Timestamp) -> Result<BatchDecision, Error> {
        validate(requests)?;
        match requests {
            [] => Ok(BatchDecision {
                decisions: Vec::new(),
                denied_by: None,
                lapsed: Vec::new(),
                alerts: Vec::new(),
            }),
            // A hold's round counts the holds it finds lapsed, one with budget alerts
            // the alerts it reaches: the round's.
            [one] if !one.limit.algorithm().holds() && one.limit.alert_at().is_empty() => {
                let decision = self.decide_one(*one, now)?;
                // Usage is charged whatever it finds: it never denies its batch.
                let denied_by = (!decision.allowed() && !one.usage).then_some(0);
                Ok(BatchDecision {
                    decisions: vec![decision],
                    denied_by,
                    lapsed: Vec::new(),
                    alerts: Vec::new(),
                })
            }
            _ => Ok(self.decide_batch(requests, now)),
        }
    }

    fn decide_batch(&self, requests: &[Request<'_>], now: Timestamp) -> BatchDecision {
        let mut locked = Locked::take(&self.inner, requests, now.as_micros());
        let batch = round::decide(&mut locked, requests, now);
        locked.put_back();
        batch
    }

    /// Forgets `key`'s state for `limit`'s shape.
    pub fn clear(&self, key: &Key, limit: &Limit) {
        let hash = self.inner.hash(key);
        let mut guard = lock(self.inner.shard(hash));
        let table = &mut *guard;
        if let Ok(mut found) = table.entries.find_entry(hash, |e| key.is(&e.key))
            && found
                .get_mut()
                .remove_state(limit.shape(), &mut table.spills)
        {
            let (entry, _) = found.remove();
            table.removed(&entry);
        }
    }
}

impl<H: HashKeys> Store for MemoryStore<H> {
    fn is_local(&self) -> bool {
        true
    }

    async fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, Error> {
        self.decide(requests, now)
    }

    fn check_one_now(
        &self,
        request: Request<'_>,
        now: Timestamp,
    ) -> Option<Result<Decision, Error>> {
        Some(self.decide_one(request, now))
    }

    fn check_joined_now(
        &self,
        parts: &[&str],
        limit: &Limit,
        cost: u64,
        now: Timestamp,
    ) -> Option<Result<Decision, Error>> {
        Some(self.decide_joined(parts, limit, cost, now))
    }

    /// Decided when called: the future is ready at once, and small.
    fn check_one(
        &self,
        request: Request<'_>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        std::future::ready(self.decide_one(request, now))
    }

    async fn reset(&self, key: &Key, limit: &Limit, _now: Timestamp) -> Result<(), Error> {
        self.clear(key, limit);
        Ok(())
    }
}

/// The longest key text (its 2-byte header included) `decide_joined` joins on the
/// stack.
const JOINED_ON_STACK: usize = 256;

#[inline]
fn lock(shard: &Shard) -> MutexGuard<'_, Table> {
    shard.0.lock()
}

// === impl Inner ===

impl<H> Inner<H> {
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    fn shard(&self, hash: u64) -> &Shard {
        &self.shards[self.shard_index(hash)]
    }
}

#[cfg(test)]
mod tests;
