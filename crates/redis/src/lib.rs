//! Spillway's Redis store: rate limit state shared by every application server that
//! uses the same Redis, with exactly the decisions of the in-memory store.
//!
//! - **One round trip per decision.** A batch of (key, limit, cost) is decided by one
//!   call of the decision library (`scripts/*.lua`) — an `FCALL` of the function library the store loads
//!   where the server has functions (Redis ≥ 7.0, Valkey), an `EVALSHA` of the script
//!   elsewhere — all or nothing, every algorithm. The Rust
//!   algorithms in `spillway_core::algorithm` are the script's specification; the
//!   conformance suite and a differential property test hold them together.
//! - **Coalesced calls.** Batches that arrive while calls are in flight share the next
//!   call, each still decided as it would be alone; a lone decision goes out at once
//!   (`coalesce.rs`; per slot on Cluster).
//! - **Standalone, Sentinel, Cluster** from a URL, over redis-rs multiplexed
//!   connections (no pool: concurrent decisions share the pipeline); TLS on all three
//!   (a private CA, a client certificate, hostname checks relaxed or, for tests, no
//!   checks), ACL users, and passwords kept out of every message ([`Access`]).
//! - **TLS needs no set-up by the application.** rustls wants one crypto provider per
//!   process: a TLS store uses the one the application installed, and installs
//!   *ring*'s if there is none (`tls.rs`). It never panics for want of one.
//! - **One clock.** By default the script reads Redis `TIME`, so app servers whose
//!   clocks disagree still agree on every decision ([`TimeSource`]).
//! - **Keys** `<prefix>{identity}:<algorithm>:<window>` (`spillway:{user:42}:gcra:60s`), hash-tagged so one
//!   identity's limits share a Cluster slot, escaped so identities never collide.
//!   Every key carries a TTL that ends when its state is the same as no state.
//! - **Bounded waits.** Every call has a timeout (10 ms by default) and fails with an
//!   error that says whether a retry can help.
//!
//! Bytes per key (`MEMORY USAGE`, Redis 7, default prefix) are in docs/performance.md.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod access;
mod coalesce;
mod connection;
mod error;
mod key;
pub mod overrides;
pub mod pem;
mod script;
mod store;
mod target;
mod tls;

pub use access::{Access, Password};
pub use coalesce::window::MAX_WINDOW;
pub use error::Error;
pub use key::{redis_key, ring_keys};
pub use script::TimeSource;
pub use store::quota;
pub use store::{
    Calls, DEFAULT_CLUSTER_SHARDS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_TIMEOUT,
    MAX_CLUSTER_SHARDS, MIN_REDIS, RedisStore, RedisStoreBuilder, Server, ServerStats, Version,
};
pub use target::redact as redact_url;
pub use tls::{TlsOptions, Verify};

/// The decision code's Lua source in its script form, as `EVAL` sends it (servers
/// without functions).
pub const SCRIPT: &str = script::SCRIPT_SOURCE;

/// The decision code as a function library: what `FUNCTION LOAD` takes, and the name
/// `FCALL` calls.
pub fn function_library() -> (&'static str, &'static str) {
    (&script::LIBRARY.source, &script::LIBRARY.function)
}

/// The script's ARGV for a call of one batch of `requests` on Redis `TIME`: `1` (one
/// batch), the number of requests, the number of keys (one per request, and a sketched
/// `distinct` limit's ring), `server`, then each request's limit (eight integers in one
/// string), cost and member (empty but for `distinct`, and `now` for a fixed window,
/// whose key names its window: [`redis_key`] at the same `now`). For tools
/// that call the script themselves (the benchmark drives `redis-benchmark` with it, so
/// Redis does exactly the work a lone decision does).
pub fn script_argv(
    requests: &[spillway_core::Request<'_>],
    now: spillway_core::Timestamp,
) -> Vec<String> {
    let mut argv = vec![
        "1".to_owned(),
        requests.len().to_string(),
        requests
            .iter()
            .map(|r| 1 + key::ring_len(r.limit) as usize)
            .sum::<usize>()
            .to_string(),
        "server".to_owned(),
    ];
    for r in requests {
        argv.push(script::limit_text(r.limit));
        argv.push(r.cost.to_string());
        argv.push(String::from_utf8_lossy(&script::member_arg(r, now)).into_owned());
    }
    argv
}
