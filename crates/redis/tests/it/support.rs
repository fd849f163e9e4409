//! Shared by the Redis test files: stores on the shared test servers.

#![allow(dead_code)]

use std::time::Duration;

use redis::Value;
use spillway_redis::{RedisStore, RedisStoreBuilder, TimeSource, TlsOptions};
use spillway_testkit::redis::{
    cluster_url, redis62_url, standalone_url, tls_cluster_url, tls_sentinel_url,
    tls_standalone_url, unique_prefix, valkey_cluster_url, valkey_url,
};

/// The deployments every behaviour is checked on.
pub fn targets() -> [(&'static str, String); 2] {
    [("standalone", standalone_url()), ("cluster", cluster_url())]
}

/// The oldest server Spillway runs on, Redis 6.2: no functions (every call an
/// `EVALSHA`), no `PEXPIRE … NX`.
pub fn oldest() -> (&'static str, String) {
    ("redis 6.2", redis62_url())
}

/// Every deployment the suite starts: [`targets`], the same over TLS (client
/// certificates required) and through a TLS sentinel, Valkey 8, and the oldest Redis.
/// The conformance tables and the exactness test run on each; the slower suites on
/// [`targets`].
pub fn topologies() -> [(&'static str, String); 8] {
    [
        ("standalone", standalone_url()),
        ("cluster", cluster_url()),
        ("tls standalone", tls_standalone_url()),
        ("tls cluster", tls_cluster_url()),
        ("tls sentinel", tls_sentinel_url()),
        ("valkey", valkey_url()),
        ("valkey cluster", valkey_cluster_url()),
        oldest(),
    ]
}

/// The shared TLS servers' CA and client certificate.
pub fn shared_tls() -> TlsOptions {
    let files = spillway_testkit::tls::shared_files();
    let mut tls = TlsOptions::default();
    tls.ca_file = Some(files.ca);
    tls.client_cert = Some(files.client.cert);
    tls.client_key = Some(files.client.key);
    tls
}

/// A builder for `url`, with the shared TLS files when it is a TLS URL.
pub fn builder(url: &str) -> RedisStoreBuilder {
    let builder = RedisStore::builder(url);
    if url.starts_with("rediss") {
        builder.tls(shared_tls())
    } else {
        builder
    }
}

/// A store on `url` reading the caller's (manual) clock, with keys under a fresh
/// prefix. The timeout is generous: these tests check decisions, not latency, on a
/// CI machine that may be busy.
pub async fn caller_clock_store(url: &str, name: &str) -> RedisStore {
    builder(url)
        .prefix(unique_prefix(name))
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// The same with Redis TIME.
pub async fn server_clock_store(url: &str, prefix: &str) -> RedisStore {
    builder(url)
        .prefix(prefix)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// A store on `url` that calls the decision script (`EVALSHA`) where it would call the
/// function library, as on a server without functions: on the caller's clock, or on
/// Redis TIME under `prefix`.
pub async fn script_store(url: &str, clock: TimeSource, prefix: &str) -> RedisStore {
    let store = builder(url)
        .prefix(prefix)
        .time_source(clock)
        .timeout(Duration::from_secs(5))
        .functions(false)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    assert!(
        matches!(store.calls(), spillway_redis::Calls::Script { .. }),
        "{:?}",
        store.calls()
    );
    store
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
