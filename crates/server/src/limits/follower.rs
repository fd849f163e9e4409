//! Overrides for a program that is not the service (a Rust service with the tower
//! layer, say): the overrides a service keeps on the Redis they share, loaded and
//! followed as a replica follows them, and read by path.

use std::sync::Arc;
use std::time::Duration;

use spillway_core::{Breaker, Limit, MemoryStore, SystemClock};
use spillway_redis::RedisStore;
use tokio_util::sync::CancellationToken;

use super::{Kept, Registry};
use crate::service::Service;
use crate::store::{AnyStore, Stores};

/// How long a read of the overrides may take (a page of them): as the service's.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A service's overrides, followed: every one loaded at the start, a change made on any
/// replica applied within [`POLL`](super::POLL) (the registry's version polled, as a
/// replica does), until the follower is dropped.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use spillway_server::limits::Follower;
/// let store = spillway_redis::RedisStore::builder("redis://10.0.0.5:6379").build().await?;
/// // The service's `key_prefix` setting: empty unless it sets one.
/// let overrides = Follower::redis(&store, "").await?;
/// // A key's own limit, when an admin set one for `api_key=<key>` in domain `api`:
/// let limit = overrides.limit("api", &[("api_key", "abc")], "per_key");
/// # Ok(()) }
/// ```
pub struct Follower {
    /// Holds the overrides' index (a service that decides nothing).
    service: Arc<Service>,
    stop: CancellationToken,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower").finish_non_exhaustive()
    }
}

impl Follower {
    /// The overrides a service with `key_prefix` (its `key_prefix` setting) keeps on
    /// `store`'s Redis, read on a connection of the follower's own: loaded now (an error
    /// when Redis does not answer), then followed by a task of the current runtime.
    pub async fn redis(store: &RedisStore, key_prefix: &str) -> Result<Follower, String> {
        let own = store.another(TIMEOUT).await.map_err(|e| e.to_string())?;
        let stores = Stores::new(
            AnyStore::Memory(MemoryStore::new()),
            Breaker::new(5, Duration::from_millis(500)),
        );
        let service = Arc::new(Service::new(
            spillway_policy::PolicySet::default(),
            stores,
            Arc::new(SystemClock),
            crate::service::Options::default(),
        ));
        let registry = Arc::new(Registry::new(
            Arc::clone(&service),
            Kept::redis(own, key_prefix),
        ));
        registry.load().await?;
        let stop = CancellationToken::new();
        tokio::spawn(registry.follow(stop.clone()));
        Ok(Follower { service, stop })
    }

    /// The limit named `name` that the override of exactly `entries` in `domain` sets
    /// (its only limit, whatever its name, when it has one); `None` when the path has
    /// none. A lookup in memory: ask it on every request.
    pub fn limit(&self, domain: &str, entries: &[(&str, &str)], name: &str) -> Option<Limit> {
        self.service.override_limit(domain, entries, name)
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
