//! How a [`MemoryStore`] is configured and sized: its bounds, its sweep interval, its
//! hasher, and how many shards hold its keys.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use super::{HashKeys, Inner, KeyHash, MemoryStore, Mutex, Rehash, Shard, Table};
use crate::time::micros;

/// Configures a [`MemoryStore`].
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder<H = KeyHash> {
    max_keys: usize,
    max_bytes: usize,
    /// `None`: [`default_shards`] of `max_keys`.
    shards: Option<usize>,
    sweep_interval: Duration,
    hasher: H,
}

impl MemoryStoreBuilder {
    /// Hashes keys with `hasher` on every check, instead of using the hash each key
    /// computed once when it was made (SipHash-1-3 under a random per-process key, the
    /// default). Keep a seeded, collision-resistant hasher when keys come from clients.
    pub fn hasher<H2: BuildHasher + Send + Sync>(
        self,
        hasher: H2,
    ) -> MemoryStoreBuilder<Rehash<H2>> {
        MemoryStoreBuilder {
            max_keys: self.max_keys,
            max_bytes: self.max_bytes,
            shards: self.shards,
            sweep_interval: self.sweep_interval,
            hasher: Rehash(hasher),
        }
    }
}

impl<H: HashKeys> MemoryStoreBuilder<H> {
    /// The most keys held (default 1,000,000). See the module docs for what happens at the bound.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// The most bytes held (default [`DEFAULT_MAX_BYTES`], 512 MiB): entries, key texts
    /// and states, as [`footprint`](MemoryStore::footprint) counts them. A key's state
    /// can be large (a `sliding_window` of precision 10,000 is 80 KB), so a bound in
    /// keys alone does not bound memory; at either bound a shard makes room the same way.
    pub fn max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes.max(1);
        self
    }

    /// Number of shards, rounded up to a power of two (default: four per CPU, and more
    /// for a large `max_keys`, one per 4,096 keys: 256 for a million).
    /// Fewer when `max_keys` is smaller, so that every shard holds at least one key.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards.max(1));
        self
    }

    /// How often, at most, each shard drops expired entries on insert (default 1 s); it
    /// also waits for a sixteenth of its entries to be new since its last sweep.
    pub fn sweep_interval(mut self, every: Duration) -> Self {
        self.sweep_interval = every;
        self
    }

    /// Builds the store.
    pub fn build(self) -> MemoryStore<H> {
        let mut shards = self
            .shards
            .unwrap_or_else(|| default_shards(self.max_keys))
            .next_power_of_two();
        while shards > self.max_keys {
            shards /= 2;
        }
        let per_shard = self.max_keys / shards;
        let per_shard_bytes = (self.max_bytes / shards).max(1);
        MemoryStore {
            inner: Arc::new(Inner {
                shards: (0..shards)
                    .map(|_| Shard(Mutex::new(Table::default())))
                    .collect(),
                hasher: self.hasher,
                per_shard,
                per_shard_bytes,
                sweep_interval: micros(self.sweep_interval),
                records: Default::default(),
            }),
        }
    }
}

impl MemoryStore {
    /// A store holding up to 1,000,000 keys, in 256 shards of at most 4,096.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder with the defaults.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder {
            max_keys: 1_000_000,
            max_bytes: DEFAULT_MAX_BYTES,
            shards: None,
            sweep_interval: Duration::from_secs(1),
            hasher: KeyHash,
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

/// The memory store's default bound in bytes: 512 MiB.
pub const DEFAULT_MAX_BYTES: usize = 512 << 20;

/// A full shard holds at most this many keys by default: the work that reads a whole
/// shard under its lock (a sweep, an eviction round, a table's growth) then takes well
/// under a millisecond.
pub(super) const KEYS_PER_SHARD: usize = 4096;

/// At least four shards per CPU (two threads rarely want one shard), and enough that
/// none holds more than [`KEYS_PER_SHARD`] keys: 256 for the default million. With 8
/// shards of 125,000 keys, a full store served at 4,000 decisions a second had a p99.9
/// of 9.7 ms and a max of 16 ms (each sweep and eviction read 125,000 entries under the
/// lock); with 256, 1.4 ms and 5.6 ms, at the same RSS (745 against 751 MB).
fn default_shards(max_keys: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    (cpus * 4)
        .max(max_keys.div_ceil(KEYS_PER_SHARD))
        .clamp(4, MAX_DEFAULT_SHARDS)
}

/// The most shards [`default_shards`] picks (16M keys at [`KEYS_PER_SHARD`]).
const MAX_DEFAULT_SHARDS: usize = 4096;
