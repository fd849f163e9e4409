//! Shared by the Redis test files: stores on the shared test servers.

#![allow(dead_code)]

use std::time::Duration;

use redis::Value;
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

/// A command from its words.
pub fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

/// A command whose reply is an integer.
pub async fn int(store: &RedisStore, args: &[&str]) -> i64 {
    match store.query(&cmd(args)).await.unwrap() {
        Value::Int(i) => i,
        other => panic!("{args:?} answered {other:?}"),
    }
}
