//! The store settings: where state lives (memory or a Redis URL), how it is reached,
//! and what a rule does when it fails; and the per-second store's.

use std::time::Duration;

use spillway_policy::OnStoreError;

/// Where counters live and how calls to it are guarded. (`Debug` redacts the URL's
/// password.)
#[derive(Clone)]
pub struct Store {
    /// `memory`, or a Redis URL.
    pub url: String,
    /// TLS and credentials for a Redis store (passwords print as `***`).
    pub redis: spillway_redis::Access,
    /// The least a store call gets; well under Envoy's 20 ms deadline.
    pub timeout: Duration,
    /// The most a store call gets when Redis's round trips are slow and vary
    /// (`None`: twice `timeout`).
    pub timeout_max: Option<Duration>,
    /// How long a decision that finds no call in flight waits for others to share
    /// its call (zero: it goes at once).
    pub window: Duration,
    /// For rules without their own `on_store_error`.
    pub on_error: OnStoreError,
    /// The breaker opens when the last `breaker_window` holds at least
    /// `breaker_failures` failures, and they are at least `breaker_ratio` of its calls.
    pub breaker_failures: u32,
    pub breaker_ratio: f64,
    pub breaker_window: Duration,
    pub breaker_cooldown: Duration,
    /// The deny cache's size in bytes (0: off); unused on the memory store.
    pub deny_cache_bytes: usize,
    /// The most bytes the memory store holds (keys and their states).
    pub memory_bytes: usize,
    /// The most bytes the leases, and the sync counts, each hold.
    pub share_bytes: usize,
    /// The deny cache also answers reference rules until their window ends, as the
    /// reference's local cache does.
    pub reference_local_cache: bool,
    /// Written before every counter key (the reference's `CACHE_KEY_PREFIX`).
    pub key_prefix: String,
    /// Virtual shards on Redis Cluster (0: a slot per key group).
    pub cluster_shards: u16,
    /// `/healthcheck` and gRPC health fail while no connection to the store is up
    /// (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
    pub health_follows_store: bool,
    /// A second Redis for the rules whose window is one second (`REDIS_PERSECOND`).
    pub per_second: Option<PerSecond>,
}

/// The per-second store: its URL, credentials and timeout (TLS files are the main
/// store's). (`Debug` redacts the URL's password.)
#[derive(Clone, Default)]
pub struct PerSecond {
    pub url: String,
    /// `None`: the main store's timeout.
    pub timeout: Option<Duration>,
    /// Its own user and password, and its sentinels' (TLS is the main store's).
    pub redis: spillway_redis::Access,
}

impl std::fmt::Debug for PerSecond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerSecond")
            .field("url", &spillway_redis::redact_url(&self.url))
            .field("timeout", &self.timeout)
            .field("redis", &self.redis)
            .finish()
    }
}

impl Store {
    /// The breaker's rule for opening, from the settings.
    pub fn trip(&self) -> spillway_core::Trip {
        spillway_core::Trip::Ratio {
            failures: self.breaker_failures,
            ratio: self.breaker_ratio,
            window: self.breaker_window,
        }
    }

    /// The per-second store's settings as a store of their own: its URL, credentials
    /// and timeout, everything else (TLS, breaker, caches) the main store's.
    pub fn per_second(&self) -> Option<Store> {
        let p = self.per_second.as_ref()?;
        let mut redis = p.redis.clone();
        redis.tls = self.redis.tls.clone();
        Some(Store {
            url: p.url.clone(),
            redis,
            timeout: p.timeout.unwrap_or(self.timeout),
            per_second: None,
            ..self.clone()
        })
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("url", &spillway_redis::redact_url(&self.url))
            .field("redis", &self.redis)
            .field("timeout", &self.timeout)
            .field("timeout_max", &self.timeout_max)
            .field("window", &self.window)
            .field("on_error", &self.on_error)
            .field("breaker_failures", &self.breaker_failures)
            .field("breaker_ratio", &self.breaker_ratio)
            .field("breaker_window", &self.breaker_window)
            .field("breaker_cooldown", &self.breaker_cooldown)
            .field("deny_cache_bytes", &self.deny_cache_bytes)
            .field("memory_bytes", &self.memory_bytes)
            .field("share_bytes", &self.share_bytes)
            .field("reference_local_cache", &self.reference_local_cache)
            .field("key_prefix", &self.key_prefix)
            .field("cluster_shards", &self.cluster_shards)
            .field("health_follows_store", &self.health_follows_store)
            .field("per_second", &self.per_second)
            .finish()
    }
}
