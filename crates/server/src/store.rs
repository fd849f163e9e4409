//! The store behind the service: the configured one (memory or Redis), guarded by
//! core's [`GuardedStore`] (breaker, failure policies, the `local` fallback).

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use spillway_core::{
    BatchDecision, Error, GuardedStore, Keep, Key, Limit, MemoryStore, Records, Request, Store,
    StoreFailure, Timestamp,
};
use spillway_redis::RedisStore;

use crate::metrics;

/// The configured store.
#[derive(Debug)]
pub enum AnyStore {
    /// In this process only.
    Memory(MemoryStore),
    /// Shared through Redis (standalone, Sentinel or Cluster).
    Redis(RedisStore),
}

impl AnyStore {
    /// `key`'s `shares` tree for `limit`, as the store holds it now (for `explain`):
    /// `None` when it holds none.
    pub async fn shares_state(
        &self,
        key: &Key,
        limit: &Limit,
        now: Timestamp,
    ) -> Result<Option<spillway_core::State>, Error> {
        match self {
            AnyStore::Memory(m) => Ok(m.state(key, limit)),
            AnyStore::Redis(r) => match r.state_bytes(key, limit, now).await? {
                None => Ok(None),
                Some(v) => spillway_core::State::shares_from_script(&v)
                    .map(Some)
                    .ok_or_else(|| Error::Store {
                        source: "the key holds no shares state".into(),
                        transient: false,
                    }),
            },
        }
    }

    /// Connects to the store `settings.url` names: `memory` (holding at most
    /// `memory_bytes`), or a Redis URL reached with `settings.redis` (TLS, credentials),
    /// within `settings.timeout` a call, with `cluster_shards` on Cluster.
    pub async fn open(settings: &crate::config::Store) -> Result<AnyStore, spillway_redis::Error> {
        if settings.url == "memory" {
            let store = MemoryStore::builder()
                .max_bytes(settings.memory_bytes)
                .build();
            return Ok(AnyStore::Memory(store));
        }
        let mut builder = RedisStore::builder(&settings.url)
            .timeout(settings.timeout)
            .window(settings.window);
        if let Some(ceiling) = settings.timeout_max {
            builder = builder.timeout_ceiling(ceiling);
        }
        let store = builder
            .access(settings.redis.clone())
            .cluster_shards(settings.cluster_shards)
            .build()
            .await?;
        tracing::info!(calls = %store.calls(), "Redis store: decisions are {}", store.calls());
        Ok(AnyStore::Redis(store))
    }

    /// Whether keys in different Redis Cluster slots need separate calls.
    pub fn is_cluster(&self) -> bool {
        matches!(self, AnyStore::Redis(r) if r.is_cluster())
    }

    /// `memory`, `redis` or `redis-cluster`, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(_) => "memory",
            AnyStore::Redis(r) if r.is_cluster() => "redis-cluster",
            AnyStore::Redis(_) => "redis",
        }
    }

    /// Whether the store answers (a Redis `PING` within the store timeout).
    pub async fn ping(&self) -> Result<(), Error> {
        match self {
            AnyStore::Memory(_) => Ok(()),
            AnyStore::Redis(r) => r.ping().await,
        }
    }
}

impl Store for AnyStore {
    fn is_local(&self) -> bool {
        matches!(self, AnyStore::Memory(_))
    }

    fn spans_groups(&self) -> bool {
        !self.is_cluster()
    }

    async fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, Error> {
        match self {
            AnyStore::Memory(m) => m.check(requests, now).await,
            AnyStore::Redis(r) => {
                // Only a remote store's latency is worth a histogram; in process, the
                // two clock reads would be most of the call's cost.
                #[allow(clippy::disallowed_methods)] // latency for the histogram, not a decision
                let started = Instant::now();
                // Boxed: the Redis call's future is kilobytes, and without the box every
                // decision's future (memory ones too) would carry and copy it. As a
                // `dyn` its type stops here, which keeps the compiler's `Send` proofs
                // for the futures holding it within the default recursion limit.
                let call: Pin<Box<dyn Future<Output = Result<BatchDecision, Error>> + Send + '_>> =
                    Box::pin(r.check(requests, now));
                let result = call.await;
                metrics::store_latency(started.elapsed());
                result
            }
        }
    }

    async fn reset(&self, key: &Key, limit: &Limit, now: Timestamp) -> Result<(), Error> {
        match self {
            AnyStore::Memory(m) => m.reset(key, limit, now).await,
            AnyStore::Redis(r) => r.reset(key, limit, now).await,
        }
    }
}

/// Reservations' records, kept with their charge: in this process, or in Redis.
impl Records for AnyStore {
    async fn check_keeping(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
        keep: Keep<'_>,
    ) -> Result<(BatchDecision, Option<String>), Error> {
        match self {
            AnyStore::Memory(m) => m.check_keeping(requests, now, keep).await,
            AnyStore::Redis(r) => Box::pin(r.check_keeping(requests, now, keep)).await,
        }
    }

    async fn take(&self, handle: &str, now: Timestamp) -> Result<Option<Vec<u8>>, Error> {
        match self {
            AnyStore::Memory(m) => m.take(handle, now).await,
            AnyStore::Redis(r) => r.take(handle, now).await,
        }
    }

    async fn put(
        &self,
        handle: &str,
        record: &[u8],
        ttl: std::time::Duration,
        now: Timestamp,
    ) -> Result<(), Error> {
        match self {
            AnyStore::Memory(m) => m.put(handle, record, ttl, now).await,
            AnyStore::Redis(r) => r.put(handle, record, ttl, now).await,
        }
    }
}

/// The configured store behind the breaker, with the `local` fallback: the one place
/// a store failure is handled, shared with the tower layer.
pub type Stores = GuardedStore<AnyStore>;

/// Records a round the store did not answer, in metrics: the breaker's state and the
/// kind of failure, for the store named `name` (`main`, `per_second`) (an open breaker too: nothing new is learned about the store, but
/// the refused calls are counted).
pub fn observe(name: &'static str, stores: &Stores, failure: &StoreFailure) {
    if failure.is_store_fault() {
        metrics::breaker(name, stores.breaker());
    }
    if failure.is_store_fault() || matches!(failure, StoreFailure::BreakerOpen) {
        metrics::store_error(name, failure.kind());
    }
}
