//! Records the service keeps beside the limits (a reservation until its commit): a key
//! under the store's prefix with a TTL, read once.

use std::time::Duration;

use redis::Value;
use spillway_core::Error as CoreError;

use super::RedisStore;

impl RedisStore {
    /// The Redis key of a record of the service's own (`kind`: `reservation`) under
    /// this store's prefix: `<prefix><kind>:<id>`.
    pub fn record_key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}:{id}", self.inner.layout.prefix)
    }

    /// Keeps `record` under [`record_key`](RedisStore::record_key) for `ttl`.
    pub async fn hold_record(
        &self,
        kind: &str,
        id: &str,
        record: &[u8],
        ttl: Duration,
    ) -> Result<(), CoreError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.record_key(kind, id))
            .arg(record)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64);
        self.query(&cmd).await.map(drop)
    }

    /// Takes the record [`hold_record`](RedisStore::hold_record) kept, if it has not
    /// expired: `GETDEL`, so of two callers taking it one gets it.
    pub async fn take_record(&self, kind: &str, id: &str) -> Result<Option<Vec<u8>>, CoreError> {
        let mut cmd = redis::cmd("GETDEL");
        cmd.arg(self.record_key(kind, id));
        match self.query(&cmd).await? {
            Value::BulkString(bytes) => Ok(Some(bytes)),
            _ => Ok(None),
        }
    }
}
