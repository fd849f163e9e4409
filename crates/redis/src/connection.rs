//! The three ways to reach Redis, behind one `query`: a standalone server (redis-rs
//! `ConnectionManager`: one multiplexed connection, reconnected in the background, and
//! replaced when it stops answering), a
//! Redis Cluster (redis-rs's cluster connection: one multiplexed connection per node,
//! slots followed through MOVED and failovers), and a master found through Sentinel
//! (re-resolved after any error that suggests it moved).
//!
//! No pool anywhere: concurrent callers share each connection's pipeline. Which kind
//! comes from the store's URL ([`Target`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisError, RedisResult, TlsMode, Value};

use crate::Error;
use crate::target::{Target, Tls};
use crate::tls::Verify;

mod sentinel;
use sentinel::Sentinel;

/// Calls in a row that got no answer in time before a connection is presumed dead
/// and replaced. A connection whose peer vanished without a reset (a host lost, a
/// partition, a NAT entry expired) raises no error for the many minutes TCP takes to
/// give up; and if bytes were lost, replies no longer line up with requests. Both
/// look like this, and only a new connection ends them (found by the reliability
/// suite's `proxy-drop` fault: the store never recovered).
const SILENT_CALLS_BEFORE_RECONNECT: u32 = 3;

/// What [`Connection::send`] sends.
#[derive(Clone, Copy)]
enum Sent<'a> {
    Command(&'a Cmd),
    Pipeline(&'a redis::Pipeline),
}

/// An open connection to one of the three kinds of deployment.
pub(crate) enum Connection {
    Standalone(Box<Standalone>),
    Cluster(ClusterConnection),
    Sentinel(Box<Sentinel>),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connection::Standalone(_) => "Standalone",
            Connection::Cluster(_) => "Cluster",
            Connection::Sentinel(_) => "Sentinel",
        })
    }
}

impl Connection {
    /// Connects, waiting at most `connect_timeout` for the first connection. redis-rs
    /// gives up on a reply after `backstop`: the store's own deadline, which follows
    /// Redis's latency and this process's stalls, comes first; `response_timeout` (the
    /// store's least timeout) paces reconnection.
    pub(crate) async fn open(
        target: &Target,
        tls: &Tls,
        connect_timeout: Duration,
        response_timeout: Duration,
        backstop: Duration,
    ) -> Result<Connection, Error> {
        if target.is_tls() {
            crate::tls::ensure_provider();
        }
        let connect = async {
            match target {
                Target::Standalone(info) => {
                    let client = redis::Client::open(tls.apply(info.clone())?)?;
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(connect_timeout))
                        .set_response_timeout(Some(backstop))
                        .set_number_of_retries(2)
                        .set_max_delay(Duration::from_millis(500));
                    let manager =
                        ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
                    Ok(Connection::Standalone(Box::new(Standalone {
                        client,
                        config,
                        current: Arc::new(Mutex::new(manager)),
                        silent: AtomicU32::new(0),
                        replacing: Arc::new(AtomicBool::new(false)),
                        attempt: (response_timeout * 20).clamp(
                            Duration::from_millis(100),
                            connect_timeout.max(Duration::from_millis(100)),
                        ),
                    })))
                }
                Target::Cluster(nodes) => {
                    let mut builder = ClusterClient::builder(nodes.iter().cloned())
                        .connection_timeout(connect_timeout)
                        .response_timeout(backstop)
                        .retries(2);
                    if target.is_tls() {
                        if let Some(certs) = &tls.certs {
                            builder = builder.certs(certs.clone());
                        }
                        builder = match tls.verify {
                            Verify::Full => builder.tls(TlsMode::Secure),
                            Verify::ChainOnly => builder
                                .tls(TlsMode::Secure)
                                .danger_accept_invalid_hostnames(true),
                            Verify::Insecure => builder.tls(TlsMode::Insecure),
                        };
                    }
                    Ok(Connection::Cluster(
                        builder.build()?.get_async_connection().await?,
                    ))
                }
                Target::Sentinel { .. } => {
                    let sentinel = Sentinel::new(target, tls, connect_timeout, backstop)?;
                    sentinel.connection().await?;
                    Ok(Connection::Sentinel(Box::new(sentinel)))
                }
            }
        };
        match tokio::time::timeout(connect_timeout, connect).await {
            Ok(result) => result.map_err(|failure: Opening| match failure {
                Opening::Redis(error) => Error::Connect {
                    url: String::new(),
                    transient: crate::error::connect_transient(&error, target.is_tls()),
                    error,
                    tls: target.is_tls(),
                },
                Opening::Setting(e) => e,
            }),
            Err(_) => Err(Error::ConnectTimeout {
                url: String::new(),
                timeout: connect_timeout,
                tls: target.is_tls(),
            }),
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// Sends one command on the shared connection. An error reply is an `Err`.
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        self.send(Sent::Command(cmd))
            .await
            .and_then(|mut values| Value::extract_error(values.remove(0)))
    }

    /// Sends `pipe`'s commands together (on Cluster, all of one slot): one reply per
    /// command, an error reply among them as a [`Value::ServerError`].
    pub(crate) async fn query_pipeline(&self, pipe: &redis::Pipeline) -> RedisResult<Vec<Value>> {
        self.send(Sent::Pipeline(pipe)).await
    }

    async fn send(&self, sent: Sent<'_>) -> RedisResult<Vec<Value>> {
        async fn on(c: &mut impl ConnectionLike, sent: Sent<'_>) -> RedisResult<Vec<Value>> {
            match sent {
                Sent::Command(cmd) => c.req_packed_command(cmd).await.map(|v| vec![v]),
                Sent::Pipeline(pipe) => c.req_packed_commands(pipe, 0, pipe.len()).await,
            }
        }
        match self {
            Connection::Standalone(s) => {
                let mut c = s.current.lock().clone();
                on(&mut c, sent).await
            }
            Connection::Cluster(c) => on(&mut c.clone(), sent).await,
            Connection::Sentinel(s) => {
                let mut c = s.connection().await.map_err(Opening::into_redis)?;
                let result = on(&mut c, sent).await;
                if let Err(e) = &result {
                    s.forget_if_moved(e);
                }
                result
            }
        }
    }

    /// A call got no answer in time: after a few in a row, the connection is replaced.
    pub(crate) fn timed_out(&self) {
        match self {
            Connection::Standalone(s) => {
                if s.silent.fetch_add(1, Ordering::Relaxed) + 1 >= SILENT_CALLS_BEFORE_RECONNECT {
                    s.replace();
                }
            }
            Connection::Sentinel(s) => {
                if s.silent.fetch_add(1, Ordering::Relaxed) + 1 >= SILENT_CALLS_BEFORE_RECONNECT {
                    s.silent.store(0, Ordering::Relaxed);
                    *s.current.lock() = None;
                }
            }
            // redis-rs's cluster connection checks and rebuilds its node connections
            // itself (slot refreshes after errors).
            Connection::Cluster(_) => {}
        }
    }

    /// A call got its answer.
    pub(crate) fn answered(&self) {
        let silent = match self {
            Connection::Standalone(s) => &s.silent,
            Connection::Sentinel(s) => &s.silent,
            Connection::Cluster(_) => return,
        };
        // A load, not a store, on the hot path: most calls find it already 0.
        if silent.load(Ordering::Relaxed) != 0 {
            silent.store(0, Ordering::Relaxed);
        }
    }
}

/// A standalone server's connection: a `ConnectionManager` (which reconnects after
/// errors), itself replaced when calls stop being answered.
pub(crate) struct Standalone {
    client: redis::Client,
    config: ConnectionManagerConfig,
    current: Arc<Mutex<ConnectionManager>>,
    /// Calls in a row without an answer in time.
    silent: AtomicU32,
    /// A replacement is being connected (one at a time).
    replacing: Arc<AtomicBool>,
    /// How long one replacement attempt may take.
    attempt: Duration,
}

impl Standalone {
    /// Connects a new manager in the background, retrying until one answers, and swaps
    /// it in; calls meanwhile use the old one. Each attempt is short: on a healthy
    /// network a connection takes milliseconds, and a long attempt begun during the
    /// outage would hold up recovery after it.
    fn replace(&self) {
        if self.replacing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (client, config, attempt) = (self.client.clone(), self.config.clone(), self.attempt);
        let (current, replacing) = (Arc::downgrade(&self.current), Arc::clone(&self.replacing));
        tokio::spawn(async move {
            // Ends when a new connection is in, or when the store is gone.
            while let Some(slot) = current.upgrade() {
                let connect = ConnectionManager::new_with_config(client.clone(), config.clone());
                if let Ok(Ok(fresh)) = tokio::time::timeout(attempt, connect).await {
                    *slot.lock() = fresh;
                    tracing::info!("replaced a Redis connection that stopped answering");
                    break;
                }
                drop(slot);
                tokio::time::sleep(attempt / 2).await;
            }
            replacing.store(false, Ordering::Release);
        });
    }
}

/// Why opening a connection failed: Redis (or the network) said no, or a setting
/// could not be applied.
enum Opening {
    Redis(RedisError),
    Setting(Error),
}

impl Opening {
    /// As an error of a call (a setting cannot fail once the store is built).
    fn into_redis(self) -> RedisError {
        match self {
            Opening::Redis(e) => e,
            Opening::Setting(e) => RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "cannot connect",
                e.to_string(),
            )),
        }
    }
}

impl From<RedisError> for Opening {
    fn from(e: RedisError) -> Opening {
        Opening::Redis(e)
    }
}

impl From<Error> for Opening {
    fn from(e: Error) -> Opening {
        Opening::Setting(e)
    }
}
