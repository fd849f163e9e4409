//! Shared by the Redis test files: stores on the shared test servers.

#![allow(dead_code)]

use std::time::Duration;

use spillway_redis::{RedisStore, TimeSource};
use spillway_testkit::redis::{cluster_url, standalone_url, unique_prefix};

/// The deployments every behaviour is checked on.
pub fn targets() -> [(&'static str, String); 2] {
    [("standalone", standalone_url()), ("cluster", cluster_url())]
}

/// A store on `url` reading the caller's (manual) clock, with keys under a fresh
/// prefix. The timeout is generous: these tests check decisions, not latency, on a
/// CI machine that may be busy.
pub async fn caller_clock_store(url: &str, name: &str) -> RedisStore {
    RedisStore::builder(url)
        .prefix(unique_prefix(name))
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// The same with Redis TIME.
pub async fn server_clock_store(url: &str, prefix: &str) -> RedisStore {
    RedisStore::builder(url)
        .prefix(prefix)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}
