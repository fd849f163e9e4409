//! Records the service keeps beside the limits (a reservation until its commit): a key
//! with a TTL, kept in the same script call as the batch it comes with
//! (`scripts/record.lua`), taken once.
//!
//! Its key is `<prefix>reservation:<id>`; on Cluster it must be in the slot of its
//! batch's keys, so it carries their hash tag, `<prefix>{<tag>}reservation:<id>`, and
//! the handle the caller keeps is `<id>-<tag in hex>`, from which a commit on any
//! replica finds the key again.

use std::time::Duration;

use redis::Value;
use spillway_core::{BatchDecision, Error as CoreError, Keep, Records, Request, Timestamp};

use super::RedisStore;
use crate::script::{Cost, Section};

impl Records for RedisStore {
    async fn check_keeping(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
        keep: Keep<'_>,
    ) -> Result<(BatchDecision, Option<String>), CoreError> {
        let Some(first) = requests.first() else {
            return Err(CoreError::InvalidRequest(
                "a record is kept with a batch, and this one is empty".into(),
            ));
        };
        let handle = if self.is_cluster() {
            let key = self.inner.layout.key(first.key, first.limit, now);
            let tag = hash_tag(&key).unwrap_or_default();
            format!("{}-{}", keep.id, to_hex(tag))
        } else {
            keep.id.to_owned()
        };
        let key = self
            .record_key(&handle)
            .expect("a handle made here is well formed");
        let (batch, kept) = self.decide(requests, now, Some((key, keep))).await?;
        Ok((batch, kept.then_some(handle)))
    }

    async fn take(&self, handle: &str, _: Timestamp) -> Result<Option<Vec<u8>>, CoreError> {
        let Some(key) = self.record_key(handle) else {
            return Ok(None);
        };
        let mut cmd = redis::cmd("GETDEL");
        cmd.arg(key);
        match self.query(&cmd).await? {
            Value::BulkString(bytes) => Ok(Some(bytes)),
            _ => Ok(None),
        }
    }

    async fn put(
        &self,
        handle: &str,
        record: &[u8],
        ttl: Duration,
        _: Timestamp,
    ) -> Result<(), CoreError> {
        let Some(key) = self.record_key(handle) else {
            return Err(CoreError::InvalidRequest(format!(
                "{handle} is not a record's handle"
            )));
        };
        let mut cmd = redis::cmd("SET");
        cmd.arg(key)
            .arg(record)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64);
        self.query(&cmd).await.map(drop)
    }
}

impl Section {
    /// Keeps `record` under `key` for `ttl` when this batch is charged, in the same
    /// call (`scripts/record.lua`): a last request that always admits, whose reply
    /// [`parse_kept`] takes off before the batch's decisions are read.
    pub(super) fn keep(&mut self, key: String, record: &[u8], ttl: Duration) {
        let ttl = u64::try_from(ttl.as_micros())
            .unwrap_or(u64::MAX)
            .max(1_000);
        self.keys.push(key);
        let cost = Cost {
            units: 1,
            usage: false,
            refund: false,
        };
        self.requests
            .push((format!("8 0 1 {ttl} 0 0 0 0"), cost, record.to_vec()));
    }
}

/// A batch's reply without its kept record's part ([`Section::keep`]), and whether the
/// record was kept: it is when the batch was admitted (`denied_by` 0).
pub(super) fn parse_kept(value: Value, tail: usize) -> (Value, bool) {
    match value {
        Value::Array(mut items) if items.len() >= 5 + tail => {
            // The record's four numbers come before the holds' and alerts' (`reply_len`).
            let end = items.len() - tail;
            items.drain(end - 4..end);
            let kept = matches!(items[0], Value::Int(0));
            (Value::Array(items), kept)
        }
        other => (other, false),
    }
}

impl RedisStore {
    /// The Redis key of the record kept under `handle` (see the module docs): `None`
    /// for a handle this store would not give (a tag on a standalone server, none on
    /// Cluster, a tag that is not hex).
    pub fn record_key(&self, handle: &str) -> Option<String> {
        let prefix = &self.inner.layout.prefix;
        match (handle.split_once('-'), self.is_cluster()) {
            (None, false) => Some(format!("{prefix}reservation:{handle}")),
            (Some((id, tag)), true) => {
                let tag = from_hex(tag)?;
                Some(format!("{prefix}{{{tag}}}reservation:{id}"))
            }
            _ => None,
        }
    }
}

/// The hash tag Redis Cluster hashes `key` by: the text between its first `{` and
/// the first `}` after it, when not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

fn to_hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::{from_hex, hash_tag, to_hex};

    #[test]
    fn hash_tags_as_redis_finds_them() {
        assert_eq!(hash_tag("spillway:{~2.41}{user:42}:gcra"), Some("~2.41"));
        assert_eq!(hash_tag("spillway:{user:42}:gcra"), Some("user:42"));
        assert_eq!(hash_tag("spillway:{}{user}"), None);
        assert_eq!(hash_tag("spillway:user"), None);
    }

    #[test]
    fn tags_go_through_hex_and_back() {
        for tag in ["~2.41", "api|api_key=k-1", "é"] {
            assert_eq!(from_hex(&to_hex(tag)).as_deref(), Some(tag));
        }
        assert_eq!(from_hex("7"), None);
        assert_eq!(from_hex("zz"), None);
    }
}
