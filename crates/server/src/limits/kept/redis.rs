//! Overrides kept in Redis, shared by every replica (the layout:
//! [`spillway_redis::overrides`]): records and changes as JSON.

use std::sync::atomic::{AtomicBool, Ordering};

use spillway_redis::RedisStore;
use spillway_redis::overrides::{OverrideKeys, Write};

use super::super::{Change, LOG_MAX, LimitsError, PathWrite, Record};
use super::Loaded;

/// The most log entries or hash fields read in one call.
const CHUNK: usize = 1000;

/// Overrides in Redis.
#[derive(Debug)]
pub struct RedisKept {
    keys: OverrideKeys,
    loaded: AtomicBool,
}

impl RedisKept {
    pub(super) fn new(store: RedisStore, key_prefix: &str) -> RedisKept {
        RedisKept {
            keys: OverrideKeys::new(store, key_prefix),
            loaded: AtomicBool::new(false),
        }
    }

    pub(super) fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Relaxed)
    }

    /// Every override, the version read before them (a change made meanwhile is read
    /// again by the next poll, and passed over where it is in already) and the log.
    pub(super) async fn load(&self) -> Result<Loaded, String> {
        let k = &self.keys;
        let version = k.version().await.map_err(|e| e.to_string())?;
        let mut records = Vec::new();
        for domain in k.domains().await.map_err(|e| e.to_string())? {
            let mut cursor = 0;
            loop {
                let (next, page) = k
                    .scan(&domain, cursor, CHUNK)
                    .await
                    .map_err(|e| e.to_string())?;
                for record in page {
                    records.push(
                        serde_json::from_str::<Record>(&record)
                            .map_err(|e| format!("an override of domain {domain}: {e}"))?,
                    );
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        let mut log = self.log(LOG_MAX).await?;
        log.reverse();
        self.loaded.store(true, Ordering::Relaxed);
        Ok((version, records, log))
    }

    /// The newest `n` changes of the log, newest first.
    async fn log(&self, n: usize) -> Result<Vec<Change>, String> {
        let mut changes = Vec::with_capacity(n.min(LOG_MAX));
        let mut start = 0;
        while start < n {
            let end = (start + CHUNK).min(n) - 1;
            let chunk = self.keys.log(start, end).await.map_err(|e| e.to_string())?;
            let done = chunk.len() < end - start + 1;
            for c in chunk {
                changes.push(serde_json::from_str(&c).map_err(|e| format!("the log: {e}"))?);
            }
            if done {
                break;
            }
            start = end + 1;
        }
        Ok(changes)
    }

    /// The changes past `version`, oldest first; `None` when the log does not reach
    /// back to the one after it.
    pub(super) async fn since(&self, version: u64) -> Result<Option<Vec<Change>>, String> {
        let now = self.keys.version().await.map_err(|e| e.to_string())?;
        if now <= version {
            return Ok(Some(Vec::new()));
        }
        let behind = usize::try_from(now - version).unwrap_or(usize::MAX);
        if behind > LOG_MAX {
            return Ok(None);
        }
        // A few more than the gap: changes made since `now` was read are at the front.
        let mut changes = self.log((behind + 64).min(LOG_MAX)).await?;
        changes.retain(|c| c.version > version);
        changes.reverse();
        let contiguous = changes
            .iter()
            .zip(version + 1..)
            .all(|(c, v)| c.version == v);
        if !contiguous || changes.first().is_none_or(|c| c.version != version + 1) {
            return Ok(None);
        }
        Ok(Some(changes))
    }

    /// Sets each of `domain`'s paths to its record (`None`: removes it), in order, in
    /// one script call: the changes made.
    pub(super) async fn write(
        &self,
        domain: &str,
        changes: &[PathWrite<'_>],
        by: &str,
        at_ms: u64,
    ) -> Result<Vec<Change>, LimitsError> {
        let unavailable = |e: String| LimitsError::Unavailable(e);
        let written = changes
            .iter()
            .map(|(path, after)| {
                Ok((
                    serde_json::to_string(path)?,
                    after.as_ref().map(serde_json::to_string).transpose()?,
                ))
            })
            .collect::<Result<Vec<_>, serde_json::Error>>()
            .map_err(|e| unavailable(e.to_string()))?;
        let by = serde_json::Value::from(by).to_string();
        let write = Write {
            domain,
            changes: &written,
            by: &by,
            at_ms,
            log_max: LOG_MAX,
        };
        let made = self
            .keys
            .write(&write)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        made.iter()
            .map(|c| serde_json::from_str(c).map_err(|e| unavailable(e.to_string())))
            .collect()
    }
}
