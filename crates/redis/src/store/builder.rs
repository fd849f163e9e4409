//! [`RedisStoreBuilder`]: a Redis store's settings, and connecting with them.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::Error;
use crate::access::Access;
use crate::coalesce::Lanes;
use crate::coalesce::window::{MAX_WINDOW, Window};
use crate::connection::Connection;
use crate::key::{Layout, Shards, check_prefix};
use crate::script::TimeSource;
use crate::target::{Target, redact};
use crate::tls::TlsOptions;

use super::calls::choose_calls;
use super::timeout::Timeouts;
use super::version::{self, Server};
use super::{
    Calls, DEFAULT_CLUSTER_SHARDS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_TIMEOUT, Inner,
    MAX_CLUSTER_SHARDS, RedisStore,
};

/// Settings for a [`RedisStore`]. (`Debug` shows the URL with its password redacted.)
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    time: TimeSource,
    timeout: Duration,
    /// `None`: twice `timeout`.
    pub(super) timeout_ceiling: Option<Duration>,
    connect_timeout: Duration,
    /// How long a decision that finds its lane idle waits for company (zero: none).
    pub(super) window: Duration,
    access: Access,
    functions: bool,
    cluster_shards: u16,
    /// Whether `build` makes a decision round to check the code runs (not for a store
    /// that only books RLQS shares: [`RedisStore::another`]).
    pub(super) probe: bool,
}

impl std::fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("time", &self.time)
            .field("timeout", &self.timeout)
            .field("timeout_ceiling", &self.timeout_ceiling)
            .field("connect_timeout", &self.connect_timeout)
            .field("window", &self.window)
            .field("access", &self.access)
            .field("functions", &self.functions)
            .field("cluster_shards", &self.cluster_shards)
            .finish()
    }
}

impl RedisStoreBuilder {
    pub(super) fn new(url: String) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url,
            prefix: DEFAULT_PREFIX.to_owned(),
            time: TimeSource::default(),
            timeout: DEFAULT_TIMEOUT,
            timeout_ceiling: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            window: Duration::ZERO,
            access: Access::default(),
            functions: true,
            cluster_shards: DEFAULT_CLUSTER_SHARDS,
            probe: true,
        }
    }

    /// On Redis Cluster, the virtual shards keys are spread over (default
    /// [`DEFAULT_CLUSTER_SHARDS`], at most [`MAX_CLUSTER_SHARDS`]; 0: none, a hash slot
    /// per key group): every key of a
    /// shard shares its slot, so decisions of many groups share one script call. Every
    /// process deciding on one Cluster must use the same number: keys of another number
    /// are other keys, and counts start afresh when it changes. Ignored elsewhere.
    pub fn cluster_shards(mut self, shards: u16) -> Self {
        self.cluster_shards = shards;
        self
    }

    /// The prefix of every key (default `spillway:`). Several applications can share
    /// one Redis under different prefixes. May not contain `{` or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Where decisions take `now` from (default: Redis `TIME`).
    pub fn time_source(mut self, time: TimeSource) -> Self {
        self.time = time;
        self
    }

    /// The least time a decision gets, retry included, before it fails with
    /// `Error::Timeout` (default [`DEFAULT_TIMEOUT`]). A store whose round trips are
    /// slower and vary more gets more, up to [`timeout_ceiling`](Self::timeout_ceiling):
    /// a smoothed round trip plus four times its deviation, as TCP times out
    /// (RFC 6298). A deadline that fired late because this process stalled moves on
    /// by as long (at most the ceiling, three times): Redis is timed out for its own
    /// silence only.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most time a decision gets (default: twice [`timeout`](Self::timeout), so
    /// 20 ms by default: Envoy's rate limit filter gives up after 20 ms). Equal to the
    /// timeout, the timeout is fixed. Below it: an error at [`build`](Self::build).
    pub fn timeout_ceiling(mut self, ceiling: Duration) -> Self {
        self.timeout_ceiling = Some(ceiling);
        self
    }

    /// How long a decision that finds nothing in flight on its way to Redis waits
    /// before its call goes, so that the decisions arriving meanwhile go in the same
    /// call (default zero: it goes at once; at most [`MAX_WINDOW`]). Decisions that
    /// find a call in flight already wait for it to end and share the next one, so
    /// this matters at everyday rates, where most find none: Redis runs fewer calls,
    /// and each decision that opens one waits the window (and up to Linux's timer
    /// slack, 50 µs, more). The reference's `REDIS_PIPELINE_WINDOW` sets it.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The longest to wait for the first connection (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// TLS and credentials beside the URL (credentials given here win over the URL's).
    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    /// TLS settings for a `rediss` URL (the other parts of [`access`](Self::access)
    /// unchanged).
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.access.tls = tls;
        self
    }

    /// Whether to call a function library where the server has functions (default
    /// true): `false` sends every call as `EVALSHA` of the script, as on Redis before
    /// 7.0 (for an ACL that allows scripts but not `FUNCTION LOAD`, say).
    pub fn functions(mut self, functions: bool) -> Self {
        self.functions = functions;
        self
    }

    /// Connects, loads the function library where the server has functions, and makes
    /// one decision round of no requests: the code is loaded then (not by the first
    /// real decision), and a user that may not run it — an ACL without `FCALL`, or
    /// `EVALSHA` and `EVAL`, or, on Redis `TIME`, `TIME` — is an error now rather than
    /// on every decision.
    pub async fn build(self) -> Result<RedisStore, Error> {
        let again = self.clone();
        check_prefix(&self.prefix).map_err(Error::InvalidSetting)?;
        if self.cluster_shards > MAX_CLUSTER_SHARDS {
            return Err(Error::InvalidSetting(format!(
                "{} cluster shards: at most {MAX_CLUSTER_SHARDS}",
                self.cluster_shards
            )));
        }
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::InvalidSetting("timeouts must be above zero".into()));
        }
        let ceiling = self.timeout_ceiling.unwrap_or(self.timeout * 2);
        if ceiling < self.timeout {
            return Err(Error::InvalidSetting(format!(
                "the timeout's ceiling ({ceiling:?}) is below the timeout ({:?})",
                self.timeout
            )));
        }
        if self.window > MAX_WINDOW {
            return Err(Error::InvalidSetting(format!(
                "a window of {:?}: at most {MAX_WINDOW:?} (each decision that opens a call waits it out)",
                self.window
            )));
        }
        let timeouts = Timeouts::new(self.timeout, ceiling);
        let window = Window::new(self.window)
            .map_err(|e| Error::InvalidSetting(format!("cannot start the window's thread: {e}")))?;
        let url = redact(&self.url);
        let (target, tls) = Target::parse(&self.url)?.with_access(&self.access)?;
        let connection = Connection::open(
            &target,
            &tls,
            self.connect_timeout,
            self.timeout,
            timeouts.backstop(),
        )
        .await
        .map_err(|e| e.at(url.clone()))?;
        let server = version::read(&connection, self.connect_timeout).await;
        if let Some(why) = server.as_ref().and_then(Server::too_old) {
            return Err(Error::TooOld { url, why });
        }
        let calls = if self.functions {
            choose_calls(&connection, self.connect_timeout)
                .await
                .map_err(|e| e.at(url.clone()))?
        } else {
            Calls::Script {
                why: "functions turned off".into(),
            }
        };
        let shards = (connection.is_cluster() && self.cluster_shards > 0)
            .then(|| Shards::new(self.cluster_shards));
        let inner = Inner {
            connection,
            layout: Layout {
                prefix: self.prefix,
                shards,
            },
            time: self.time,
            timeouts,
            window,
            again,
            calls,
            server,
            functions_lost: AtomicBool::new(false),
            scripts: Lanes::default(),
            counted: Lanes::default(),
            expiring: Default::default(),
        };
        if self.probe {
            inner
                .probe(self.connect_timeout)
                .await
                .map_err(|e| e.at(url))?;
        }
        Ok(RedisStore {
            inner: Arc::new(inner),
        })
    }
}
