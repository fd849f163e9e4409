//! `RedisStore`: the `Store` trait over one call of the decision code per round.
//!
//! A decision builds its batch's keys and arguments and goes out at once when its
//! lane has room for another call, or else with the decisions that arrive meanwhile,
//! in the next call (`coalesce.rs`; the call itself: `store/call.rs`). Where the server
//! has functions (Redis ≥ 7.0,
//! Valkey) the store loads its library at startup and a call is an `FCALL`; on
//! "function not found" (a `FUNCTION FLUSH`, a node that joined without it) it loads
//! the library again and sends the call once more. Elsewhere a call sends `EVALSHA`,
//! and on `NOSCRIPT` (a restart, a failover to a replica that never loaded it,
//! `SCRIPT FLUSH`) the same call once as `EVAL` with the source, which also caches it
//! again. Never a loop: a second failure is the caller's error. A decision, wait and
//! retry included, is bounded by the store's timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{Cmd, Value};
use spillway_core::store::{is_counted, validate};
use spillway_core::{
    BatchDecision, Error as CoreError, Keep, Key, Limit, Request, Store, Timestamp,
};

use crate::Error;
use crate::coalesce::{Failure, Kind, Lanes};
use crate::connection::Connection;
use crate::key::{Layout, ring_keys};
use crate::script::{self, Section, TimeSource};

mod builder;
mod call;
mod calls;
pub(crate) mod counter;
pub mod quota;
mod records;
mod stats;
mod timeout;
mod version;

pub use builder::RedisStoreBuilder;
pub use calls::Calls;
pub use stats::ServerStats;
pub use version::{MIN_REDIS, Server, Version};

/// The default time a decision may take before the call fails with
/// [`Error::Timeout`](spillway_core::Error::Timeout): well under Envoy's 20 ms
/// rate limit RPC deadline, far above a healthy Redis round trip (~0.1 ms on a LAN).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(10);

/// The default time to wait for the first connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The default number of virtual shards on Cluster ([`RedisStoreBuilder::cluster_shards`]):
/// one per master of the smallest Cluster. A call carries the decisions of one shard, so
/// fewer shards make larger calls (measured on 3 masters, 32 callers: 15.9 decisions a
/// call with 1 shard, 5.9 with 3, 3.0 with 6, 1.8 with 12, 1.0 with none); more
/// shards spread over more masters and move in smaller pieces when resharding.
pub const DEFAULT_CLUSTER_SHARDS: u16 = 3;

/// The most virtual shards on Cluster: a shard per 16 slots (its tag is found among
/// about as many candidates as that, at startup).
pub const MAX_CLUSTER_SHARDS: u16 = 1024;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "spillway:";

/// Rate limit state in Redis, shared by every process that uses the same Redis and
/// prefix. Cheap to clone: clones share the connection.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use spillway_core::{Algorithm, Key, Limit, Limiter};
/// use spillway_redis::RedisStore;
/// use std::time::Duration;
///
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let limiter = Limiter::new(store);
/// let limit = Limit::new(Algorithm::Gcra, 100, Duration::from_secs(60))?;
/// let decision = limiter.check(&Key::new("user:42")?, &limit).await?;
/// println!("allowed: {}, remaining: {}", decision.allowed(), decision.remaining);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connection: Connection,
    layout: Layout,
    time: TimeSource,
    timeouts: timeout::Timeouts,
    /// What a decision that finds its lane idle waits for company.
    window: crate::coalesce::window::Window,
    /// How it was built: [`RedisStore::another`] builds again from it.
    again: RedisStoreBuilder,
    calls: Calls,
    /// The server, as `INFO server` said at connection; `None` if it would not say.
    server: Option<Server>,
    /// Set when a server that had functions stops knowing `FCALL` (a failover to an
    /// older server): calls go as scripts from then on.
    functions_lost: AtomicBool,
    /// The script's batches waiting for their calls.
    scripts: Lanes<Section>,
    /// The reference's counted batches waiting for their calls.
    counted: Lanes<counter::Counted>,
    /// Window keys of the reference's rules whose TTL this process has seen set.
    expiring: counter::Expiring,
}

// === impl RedisStore ===

impl RedisStore {
    /// Connects to the store at `url` with the default settings (see
    /// [`RedisStoreBuilder`] for URL forms and settings).
    pub async fn connect(url: &str) -> Result<RedisStore, Error> {
        RedisStore::builder(url).build().await
    }

    /// Settings for a store at `url`: `redis://host:port[/db]`, `rediss://…`,
    /// `unix:///path`, `redis+cluster://host:port,host:port,…`, or
    /// `redis+sentinel://host:port,…/master_name[/db]`.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url.into())
    }

    /// The server it connected to, as `INFO server` said then (a Cluster's oldest
    /// node); `None` if the server would not say.
    pub fn server(&self) -> Option<&Server> {
        self.inner.server.as_ref()
    }

    /// How decisions reach Redis: `FCALL` of a function library, or `EVALSHA` of a
    /// script (and why).
    pub fn calls(&self) -> Calls {
        if self.inner.functions_lost.load(Ordering::Relaxed) {
            return Calls::Script {
                why: "the server stopped knowing FCALL after the library was loaded".into(),
            };
        }
        self.inner.calls.clone()
    }

    /// The Redis key holding `key`'s state for `limit` at `now` (a fixed window has a
    /// key per window: the one holding `now`).
    pub fn key_for(&self, key: &Key, limit: &Limit, now: Timestamp) -> String {
        self.inner.layout.key(key, limit, now)
    }

    /// The prefix of every key this store writes (`spillway:` by default).
    pub fn prefix(&self) -> &str {
        &self.inner.layout.prefix
    }

    /// A store of the same server, prefix and settings on a connection of its own,
    /// whose calls may take `timeout`: for work whose calls must not wait behind the
    /// decisions', nor count against their connection (RLQS's shares). It runs scripts
    /// (no function library is loaded) and makes no decision round at its start.
    pub async fn another(&self, timeout: Duration) -> Result<RedisStore, Error> {
        let mut again = self.inner.again.clone().timeout(timeout).functions(false);
        again.timeout_ceiling = Some(timeout);
        again.window = Duration::ZERO;
        again.probe = false;
        again.build().await
    }

    /// Whether this store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.connection.is_cluster()
    }

    /// Where decisions take `now` from.
    pub fn time_source(&self) -> TimeSource {
        self.inner.time
    }

    /// Sends `cmd` on the store's connection, bounded by the store's timeout: for
    /// operators' commands and tests (`MEMORY USAGE`, `SCRIPT FLUSH`, …).
    pub async fn query(&self, cmd: &Cmd) -> Result<Value, CoreError> {
        self.inner
            .bounded(self.inner.connection.query(cmd))
            .await
            .map_err(Failure::error)
    }

    /// The bytes of `key`'s state for `limit` at `now` as the script keeps them
    /// (`None`: no state), for a reader of one algorithm's layout (`explain` reads a
    /// `shares` tree: `State::shares_from_script`).
    pub async fn state_bytes(
        &self,
        key: &Key,
        limit: &Limit,
        now: Timestamp,
    ) -> Result<Option<Vec<u8>>, CoreError> {
        let mut get = redis::cmd("GET");
        get.arg(self.key_for(key, limit, now));
        match self.query(&get).await? {
            Value::BulkString(v) => Ok(Some(v)),
            _ => Ok(None),
        }
    }

    /// Whether Redis answers a `PING` within the store's timeout (readiness checks).
    pub async fn ping(&self) -> Result<(), CoreError> {
        self.query(&redis::cmd("PING")).await.map(drop)
    }
}

impl RedisStore {
    /// `requests` with each refund to a fixed window that has ended since its charge
    /// made a look: the window's key is another now, and its budget went with it (as
    /// the memory store gives back only in the window of the charge).
    fn ended_refunds_look<'a>(&self, requests: &[Request<'a>], now: Timestamp) -> Vec<Request<'a>> {
        let layout = &self.inner.layout;
        requests
            .iter()
            .map(|r| match r.refund {
                Some(at)
                    if r.limit.algorithm() == spillway_core::Algorithm::FixedWindow
                        && layout.key(r.key, r.limit, at) != layout.key(r.key, r.limit, now) =>
                {
                    Request::usage(r.key, r.limit, 0)
                }
                _ => *r,
            })
            .collect()
    }
}

impl RedisStore {
    /// Decides `requests` in one call; with `keep`, keeps its record (under its key) in
    /// the same call when the batch is admitted, and says whether it did.
    async fn decide(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
        keep: Option<(String, Keep<'_>)>,
    ) -> Result<(BatchDecision, bool), CoreError> {
        validate(requests)?;
        if requests.is_empty() && keep.is_none() {
            let none = BatchDecision {
                decisions: Vec::new(),
                denied_by: None,
                lapsed: Vec::new(),
                alerts: Vec::new(),
            };
            return Ok((none, false));
        }
        let settled;
        let requests = if requests.iter().any(|r| r.refund.is_some()) {
            settled = self.ended_refunds_look(requests, now);
            &settled[..]
        } else {
            requests
        };
        let mut keys: Vec<String> = requests
            .iter()
            .map(|r| self.inner.layout.key(r.key, r.limit, now))
            .collect();
        let slot = if self.is_cluster() {
            Some(same_slot(&keys, requests)?)
        } else {
            None
        };
        let deadline = tokio::time::Instant::now() + self.inner.timeouts.current();
        // The reference's rules take plain commands, no script (`counter.rs`), unless a
        // record comes with them: only the script keeps it with the batch.
        let counted = keep.is_none()
            && requests
                .iter()
                .all(|r| is_counted(r.limit) && r.refund.is_none());
        if counted {
            let expiring = &self.inner.expiring;
            let windows = counter::windows(&keys, requests, now, expiring);
            let batch = counter::Counted::new(keys, requests, windows.clone());
            let part = self
                .inner
                .carry((slot, Kind::Light), batch, deadline)
                .await?;
            let (decision, lost) = counter::decide(requests, &windows, part, now, expiring)?;
            if !lost.is_empty() {
                self.inner
                    .expire_again(requests, &windows, &lost, now, deadline)
                    .await;
            }
            return Ok((decision, false));
        }
        let kind = match spillway_core::is_heavy(requests) {
            true => Kind::Heavy,
            false => Kind::Light,
        };
        if requests
            .iter()
            .any(|r| r.limit.algorithm().counts_members())
        {
            keys = keys
                .into_iter()
                .zip(requests)
                .flat_map(|(state, r)| {
                    let ring: Vec<String> = ring_keys(&state, r.limit).collect();
                    std::iter::once(state).chain(ring)
                })
                .collect();
        }
        let mut section = Section::new(keys, requests, self.inner.time, now);
        let tail = section.tail;
        let keeps = keep
            .map(|(key, keep)| section.keep(key, keep.record, keep.ttl))
            .is_some();
        let part = self.inner.carry((slot, kind), section, deadline).await?;
        let (part, kept) = match keeps {
            true => records::parse_kept(part, tail),
            false => (part, false),
        };
        Ok((script::parse_reply(part, requests)?, kept))
    }
}

impl Store for RedisStore {
    async fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, CoreError> {
        self.decide(requests, now, None)
            .await
            .map(|(batch, _)| batch)
    }

    fn spans_groups(&self) -> bool {
        !self.is_cluster()
    }

    async fn reset(&self, key: &Key, limit: &Limit, now: Timestamp) -> Result<(), CoreError> {
        let mut cmd = redis::cmd("DEL");
        let state = self.key_for(key, limit, now);
        cmd.arg(ring_keys(&state, limit).collect::<Vec<_>>())
            .arg(state);
        self.query(&cmd).await.map(drop)
    }
}

/// On Cluster every key of one script call must live in one slot: that slot.
/// Keys of one group always do; keys of different groups are refused, even where
/// they happen to share a slot (a virtual shard, a hash), so that whether a batch is
/// accepted never depends on hashing.
fn same_slot(keys: &[String], requests: &[Request<'_>]) -> Result<Slot, CoreError> {
    let group = requests[0].key.group();
    match requests.iter().position(|r| r.key.group() != group) {
        None => Ok(Slot::for_key(&keys[0])),
        Some(i) => Err(CoreError::InvalidRequest(format!(
            "keys `{}` and `{}` are in different key groups, which Redis Cluster may keep \
             on different nodes, so one atomic decision cannot cover both; put them in \
             one key group, e.g. \
             `Key::grouped(\"tenant-1\", \":user:7\")` and \
             `Key::grouped(\"tenant-1\", \":ip:10.0.0.1\")`",
            requests[0].key.as_str(),
            requests[i].key.as_str()
        ))),
    }
}
