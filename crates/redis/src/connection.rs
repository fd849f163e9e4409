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
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, Cmd, IntoConnectionInfo, RedisError, RedisResult, Value};

use crate::Error;
use crate::target::Target;

/// Calls in a row that got no answer in time before a connection is presumed dead
/// and replaced. A connection whose peer vanished without a reset (a host lost, a
/// partition, a NAT entry expired) raises no error for the many minutes TCP takes to
/// give up; and if bytes were lost, replies no longer line up with requests. Both
/// look like this, and only a new connection ends them (found by the reliability
/// suite's `proxy-drop` fault: the store never recovered).
const SILENT_CALLS_BEFORE_RECONNECT: u32 = 3;

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
    /// Connects, waiting at most `connect_timeout` for the first connection.
    pub(crate) async fn open(
        target: &Target,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Connection, Error> {
        let connect = async {
            match target {
                Target::Standalone(url) => {
                    let client = redis::Client::open(url.as_str())?;
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(connect_timeout))
                        .set_response_timeout(Some(response_timeout))
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
                    let client = ClusterClient::builder(nodes.iter().map(String::as_str))
                        .connection_timeout(connect_timeout)
                        .response_timeout(response_timeout)
                        .retries(2)
                        .build()?;
                    Ok(Connection::Cluster(client.get_async_connection().await?))
                }
                Target::Sentinel { .. } => {
                    let sentinel = Sentinel::new(target, connect_timeout, response_timeout)?;
                    sentinel.connection().await?;
                    Ok(Connection::Sentinel(Box::new(sentinel)))
                }
            }
        };
        match tokio::time::timeout(connect_timeout, connect).await {
            Ok(result) => result.map_err(|source: RedisError| Error::Connect {
                url: String::new(),
                transient: crate::error::is_transient(&source),
                source,
            }),
            Err(_) => Err(Error::ConnectTimeout {
                url: String::new(),
                timeout: connect_timeout,
            }),
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// Sends one command on the shared connection. An error reply is an `Err`.
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        self.send(cmd).await.and_then(Value::extract_error)
    }

    async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Connection::Standalone(s) => {
                let mut c = s.current.lock().clone();
                c.req_packed_command(cmd).await
            }
            Connection::Cluster(c) => c.clone().req_packed_command(cmd).await,
            Connection::Sentinel(s) => {
                let mut c = s.connection().await?;
                let result = c.req_packed_command(cmd).await;
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

/// A master found through Sentinel, re-resolved when it stops answering as master.
pub(crate) struct Sentinel {
    client: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<MultiplexedConnection>>,
    /// Calls in a row without an answer in time.
    silent: AtomicU32,
    config: AsyncConnectionConfig,
}

impl Sentinel {
    fn new(target: &Target, connect: Duration, response: Duration) -> RedisResult<Sentinel> {
        let Target::Sentinel {
            sentinels,
            master,
            auth,
            db,
            tls,
        } = target
        else {
            unreachable!("Sentinel::new on {target:?}")
        };
        // The master's settings (database, credentials, TLS) come from a redis:// URL.
        let scheme = if *tls { "rediss" } else { "redis" };
        let db = db.map_or(String::new(), |d| format!("/{d}"));
        let master_info = format!("{scheme}://{auth}placeholder:6379{db}")
            .into_connection_info()?
            .redis_settings()
            .clone();
        let mut node = SentinelNodeConnectionInfo::default().set_redis_connection_info(master_info);
        if *tls {
            node = node.set_tls_mode(redis::TlsMode::Secure);
        }
        let client = SentinelClient::build(
            sentinels.clone(),
            master.clone(),
            Some(node),
            SentinelServerType::Master,
        )?;
        Ok(Sentinel {
            client: tokio::sync::Mutex::new(client),
            current: Mutex::new(None),
            silent: AtomicU32::new(0),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect))
                .set_response_timeout(Some(response)),
        })
    }

    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(c) = self.current.lock().clone() {
            return Ok(c);
        }
        let mut client = self.client.lock().await;
        // Another caller may have connected while this one waited for the lock.
        if let Some(c) = self.current.lock().clone() {
            return Ok(c);
        }
        let c = client
            .get_async_connection_with_config(&self.config)
            .await?;
        *self.current.lock() = Some(c.clone());
        Ok(c)
    }

    /// Drops the connection after an error that means the master may have moved
    /// (connection lost, READONLY from a demoted master, …): the next call asks the
    /// sentinels again.
    fn forget_if_moved(&self, e: &RedisError) {
        if crate::error::is_transient(e) {
            *self.current.lock() = None;
        }
    }
}
