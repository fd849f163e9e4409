//! The three ways to reach Redis, behind one `query`: a standalone server (redis-rs
//! `ConnectionManager`: one multiplexed connection, reconnected in the background), a
//! Redis Cluster (redis-rs's cluster connection: one multiplexed connection per node,
//! slots followed through MOVED and failovers), and a master found through Sentinel
//! (re-resolved after any error that suggests it moved).
//!
//! No pool anywhere: concurrent callers share each connection's pipeline.
//!
//! URLs:
//! - `redis://[user:pass@]host:port[/db]`, `rediss://…` (TLS), `unix:///path/redis.sock`
//!   or `redis+unix:///path`
//! - `redis+cluster://[user:pass@]host:port,host:port,…` (seed nodes; `rediss+cluster` for TLS)
//! - `redis+sentinel://[user:pass@]host:port,host:port,…/master_name[/db]`
//!   (`user:pass` is for the master; sentinels are asked without it)

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

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Standalone(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        auth: String,
        db: Option<i64>,
        tls: bool,
    },
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, Error> {
        let bad = |why: &str| Error::InvalidUrl(format!("`{}`: {why}", redact(url)));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected a URL like redis://host:port"))?;
        match scheme {
            "redis" | "rediss" | "unix" | "redis+unix" => {
                url.into_connection_info()
                    .map_err(|e| bad(&e.to_string()))?;
                Ok(Target::Standalone(url.to_owned()))
            }
            "redis+cluster" | "rediss+cluster" => {
                let (auth, hosts) = split_auth(rest);
                let hosts = hosts.trim_end_matches('/');
                let base = if scheme == "rediss+cluster" {
                    "rediss"
                } else {
                    "redis"
                };
                let nodes = hosts
                    .split(',')
                    .map(|h| check_host(h).map(|h| format!("{base}://{auth}{h}")))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad(&e))?;
                Ok(Target::Cluster(nodes))
            }
            "redis+sentinel" | "rediss+sentinel" => {
                let (auth, rest) = split_auth(rest);
                let (hosts, path) = rest
                    .split_once('/')
                    .ok_or_else(|| bad("expected redis+sentinel://host:port,…/master_name"))?;
                let mut path = path.split('/').filter(|p| !p.is_empty());
                let master = path
                    .next()
                    .ok_or_else(|| bad("the master name is missing after the hosts"))?;
                let db = path
                    .next()
                    .map(|d| {
                        d.parse::<i64>()
                            .map_err(|_| bad("the database is not a number"))
                    })
                    .transpose()?;
                let sentinels = hosts
                    .split(',')
                    .map(|h| check_host(h).map(|h| format!("redis://{h}")))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad(&e))?;
                Ok(Target::Sentinel {
                    sentinels,
                    master: master.to_owned(),
                    auth: auth.to_owned(),
                    db,
                    tls: scheme == "rediss+sentinel",
                })
            }
            other => Err(bad(&format!(
                "unknown scheme `{other}` (expected redis, rediss, unix, redis+cluster or \
                 redis+sentinel)"
            ))),
        }
    }
}

/// `user:pass@` (kept with its `@`) and the rest.
fn split_auth(rest: &str) -> (&str, &str) {
    match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    }
}

fn check_host(h: &str) -> Result<&str, String> {
    match h.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(h),
        _ => Err(format!("`{h}` is not host:port")),
    }
}

/// The URL with any password replaced, for error messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let auth = &url[s + 3..at];
            match auth.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_of_url() {
        assert_eq!(
            Target::parse("redis://127.0.0.1:7000/2").unwrap(),
            Target::Standalone("redis://127.0.0.1:7000/2".into())
        );
        assert!(matches!(
            Target::parse("unix:///tmp/redis.sock").unwrap(),
            Target::Standalone(_)
        ));
        assert_eq!(
            Target::parse("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001").unwrap(),
            Target::Cluster(vec![
                "redis://u:p@10.0.0.1:7000".into(),
                "redis://u:p@10.0.0.2:7001".into()
            ])
        );
        assert_eq!(
            Target::parse("redis+sentinel://:pw@s1:26379,s2:26379/mymaster/3").unwrap(),
            Target::Sentinel {
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
                master: "mymaster".into(),
                auth: ":pw@".into(),
                db: Some(3),
                tls: false,
            }
        );
    }

    #[test]
    fn bad_urls_say_what_is_wrong_without_the_password() {
        let err = |u: &str| Target::parse(u).unwrap_err().to_string();
        assert!(err("localhost:6379").contains("expected a URL like redis://host:port"));
        assert!(err("http://x:1").contains("unknown scheme `http`"));
        assert!(err("redis+cluster://a:1,b").contains("`b` is not host:port"));
        assert!(err("redis+sentinel://a:1").contains("master_name"));
        let e = err("redis+cluster://user:secret@a:1,b");
        assert!(e.contains("user:***@") && !e.contains("secret"), "{e}");
    }
}
