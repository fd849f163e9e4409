//! A master found through Sentinel: the sentinels asked with their own credentials
//! and TLS, and the master re-resolved when it stops answering as master.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo,
    RedisError, RedisResult, Value,
};

use crate::Error;
use crate::target::{Target, Tls};

use super::Opening;

/// A master found through Sentinel, re-resolved when it stops answering as master.
///
/// The sentinels are asked here rather than through redis-rs's `SentinelClient`, so
/// that the sentinels and the master each get their own credentials and the same TLS
/// (its hostname setting included, which redis-rs's client cannot pass on to them).
pub(crate) struct Sentinel {
    /// The sentinels, TLS applied.
    sentinels: Vec<ConnectionInfo>,
    master: String,
    /// The master's database and credentials.
    redis: RedisConnectionInfo,
    /// `Some` when the master speaks TLS.
    tls: Option<Tls>,
    /// One resolution at a time.
    resolving: tokio::sync::Mutex<()>,
    pub(super) current: Mutex<Option<MultiplexedConnection>>,
    /// Calls in a row without an answer in time.
    pub(super) silent: AtomicU32,
    config: AsyncConnectionConfig,
}

impl Sentinel {
    pub(super) fn new(
        target: &Target,
        tls: &Tls,
        connect: Duration,
        response: Duration,
    ) -> Result<Sentinel, Error> {
        let Target::Sentinel {
            sentinels,
            master,
            redis,
            tls: master_tls,
        } = target
        else {
            unreachable!("Sentinel::new on {target:?}")
        };
        Ok(Sentinel {
            sentinels: sentinels
                .iter()
                .map(|s| tls.apply(s.clone()))
                .collect::<Result<_, _>>()?,
            master: master.clone(),
            redis: redis.clone(),
            tls: master_tls.then(|| tls.clone()),
            resolving: tokio::sync::Mutex::new(()),
            current: Mutex::new(None),
            silent: AtomicU32::new(0),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect))
                .set_response_timeout(Some(response)),
        })
    }

    pub(super) async fn connection(&self) -> Result<MultiplexedConnection, Opening> {
        if let Some(c) = self.current.lock().clone() {
            return Ok(c);
        }
        let _resolving = self.resolving.lock().await;
        // Another caller may have connected while this one waited for the lock.
        if let Some(c) = self.current.lock().clone() {
            return Ok(c);
        }
        let c = self.resolve().await?;
        *self.current.lock() = Some(c.clone());
        Ok(c)
    }

    /// Asks each sentinel in turn where the master is, and connects to the first
    /// answer that says `master` to `ROLE`. The last error if none does.
    async fn resolve(&self) -> Result<MultiplexedConnection, Opening> {
        let mut last = None;
        for sentinel in &self.sentinels {
            match self.master_via(sentinel).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Opening::Redis(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no sentinel in the store URL",
            )))
        }))
    }

    async fn master_via(
        &self,
        sentinel: &ConnectionInfo,
    ) -> Result<MultiplexedConnection, Opening> {
        let mut s = redis::Client::open(sentinel.clone())?
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let (host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master)
            .query_async::<Option<(String, u16)>>(&mut s)
            .await?
            .ok_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "the sentinel does not know the master",
                    self.master.clone(),
                ))
            })?;
        let info = match &self.tls {
            Some(tls) => tls.apply(master_info(
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: false,
                    tls_params: None,
                },
                &self.redis,
            )?)?,
            None => master_info(ConnectionAddr::Tcp(host, port), &self.redis)?,
        };
        let mut c = redis::Client::open(info)?
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut c).await?;
        match role.first() {
            Some(Value::BulkString(r)) if r == b"master" => Ok(c),
            _ => Err(Opening::Redis(RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "the address the sentinel gave is not a master (a failover in progress)",
            )))),
        }
    }

    /// Drops the connection after an error that means the master may have moved
    /// (connection lost, READONLY from a demoted master, …): the next call asks the
    /// sentinels again.
    pub(super) fn forget_if_moved(&self, e: &RedisError) {
        if crate::error::is_transient(e) {
            *self.current.lock() = None;
        }
    }
}

fn master_info(addr: ConnectionAddr, redis: &RedisConnectionInfo) -> RedisResult<ConnectionInfo> {
    Ok(addr
        .into_connection_info()?
        .set_redis_settings(redis.clone()))
}
