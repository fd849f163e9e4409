//! The stores behind the service: the configured one (memory or Redis) behind a circuit
//! breaker, and the in-process store that `on_store_error: local` rules fall back to.

use std::time::{Duration, Instant};

use spillway_core::{BatchDecision, Error, Key, Limit, MemoryStore, Request, Store, Timestamp};
use spillway_redis::RedisStore;

use crate::metrics;
use spillway_core::{Breaker, BreakerState, StoreFailure};

/// The configured store.
#[derive(Debug)]
pub enum AnyStore {
    /// In this process only.
    Memory(MemoryStore),
    /// Shared through Redis (standalone, Sentinel or Cluster).
    Redis(RedisStore),
}

impl AnyStore {
    /// Connects to the store a URL names: `memory`, or a Redis URL.
    pub async fn open(url: &str, timeout: Duration) -> Result<AnyStore, spillway_redis::Error> {
        if url == "memory" {
            return Ok(AnyStore::Memory(MemoryStore::new()));
        }
        let store = RedisStore::builder(url).timeout(timeout).build().await?;
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
    async fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, Error> {
        match self {
            AnyStore::Memory(m) => m.check(requests, now).await,
            // Boxed: the Redis call's future is kilobytes, and without the box every
            // decision's future (memory ones too) would carry and copy it.
            AnyStore::Redis(r) => Box::pin(r.check(requests, now)).await,
        }
    }

    async fn reset(&self, key: &Key, limit: &Limit) -> Result<(), Error> {
        match self {
            AnyStore::Memory(m) => m.reset(key, limit).await,
            AnyStore::Redis(r) => r.reset(key, limit).await,
        }
    }
}

/// The configured store, guarded; and the local fallback.
#[derive(Debug)]
pub struct Stores {
    pub primary: AnyStore,
    pub local: MemoryStore,
    breaker: Breaker,
}

impl Stores {
    pub fn new(primary: AnyStore, breaker: Breaker) -> Stores {
        Stores {
            primary,
            local: MemoryStore::new(),
            breaker,
        }
    }

    /// One decision round on the configured store, unless the breaker is open.
    pub async fn decide(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreFailure> {
        if !self.breaker.admit(now) {
            metrics::store_error("breaker_open");
            return Err(StoreFailure::BreakerOpen);
        }
        // Only a remote store's latency is worth a histogram; in process, the two clock
        // reads would be most of the call's cost.
        let remote = matches!(self.primary, AnyStore::Redis(_));
        #[allow(clippy::disallowed_methods)] // latency for the histogram, not a decision
        let started = remote.then(Instant::now);
        let result = self.primary.check(requests, now).await;
        if let Some(started) = started {
            metrics::store_latency(started.elapsed());
        }
        let result = self.breaker.record(result, now);
        if let Err(failure) = &result
            && failure.is_store_fault()
        {
            metrics::breaker(self.breaker.state());
            metrics::store_error(failure.kind());
        }
        result
    }

    /// A decision round on the in-process fallback store.
    pub fn decide_locally(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, Error> {
        self.local.decide(requests, now)
    }

    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }
}
