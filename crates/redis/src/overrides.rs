//! Overrides (limits set as data, kept for every replica): the Redis layout. Every key
//! is under one hash tag, so that a change (the override, the version, the log) is one
//! script call, atomic on Cluster too; overrides are admin data, not per-request state,
//! and fit one node:
//!
//! - `{prefix}{overrides}:d:{domain}`: a hash, a path to its override's record (the
//!   prefix: the store's, `spillway:` by default, then the service's `key_prefix`);
//! - `…:domains`: the set of domains that have overrides;
//! - `…:version`: the version of the last change (`INCR`);
//! - `…:log`: the last changes, newest first.
//!
//! Records and changes are JSON objects the caller writes and reads; this module only
//! keeps them (the script splices the version into them).

use redis::Value;

use crate::RedisStore;
use spillway_core::Error;

/// One change: the record set (or the path's removed), the version counted, the
/// domain listed (or unlisted once empty), the change logged with what it replaced
/// (`{"version":V,"by":…,"at_ms":…,"before":…,"after":…}`). Removing a path that has
/// no override changes nothing and answers 0.
const WRITE: &str = r#"
local before = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '' and not before then return {0, false} end
local v = redis.call('INCR', KEYS[2])
local after = 'null'
if ARGV[2] ~= '' then
  after = '{"version":' .. v .. ',' .. string.sub(ARGV[2], 2)
  redis.call('HSET', KEYS[1], ARGV[1], after)
  redis.call('SADD', KEYS[3], ARGV[5])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
  if redis.call('HLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[3], ARGV[5]) end
end
local change = '{"version":' .. v .. ',"by":' .. ARGV[3] .. ',"at_ms":' .. ARGV[4] ..
  ',"before":' .. (before or 'null') .. ',"after":' .. after .. '}'
redis.call('LPUSH', KEYS[4], change)
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[6]) - 1)
return {v, change}
"#;

/// Overrides in Redis, through a store (a connection of their own, say).
#[derive(Debug)]
pub struct OverrideKeys {
    store: RedisStore,
    /// `{prefix}{overrides}:`, every key's start.
    root: String,
}

/// One change to write: `domain`'s `path` set to `record` (`None`: removed).
#[derive(Debug)]
pub struct Write<'a> {
    /// The domain whose hash holds the path.
    pub domain: &'a str,
    /// The path, as the field of the domain's hash.
    pub path: &'a str,
    /// The record, a JSON object without its version (the script adds it).
    pub record: Option<&'a str>,
    /// Who, as a JSON string.
    pub by: &'a str,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// How many changes the log keeps.
    pub log_max: usize,
}

fn parse<T: redis::FromRedisValue>(v: Value) -> Result<T, Error> {
    redis::from_redis_value(v).map_err(|e| Error::Store {
        source: e.to_string().into(),
        transient: false,
    })
}

impl OverrideKeys {
    /// Under the store's prefix and then `key_prefix` (the service's).
    pub fn new(store: RedisStore, key_prefix: &str) -> OverrideKeys {
        OverrideKeys {
            root: format!("{}{key_prefix}{{overrides}}:", store.prefix()),
            store,
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.root)
    }

    fn domain_key(&self, domain: &str) -> String {
        format!("{}d:{domain}", self.root)
    }

    /// The version of the last change (0: none ever).
    pub async fn version(&self) -> Result<u64, Error> {
        let v: Option<u64> = parse(
            self.store
                .query(redis::cmd("GET").arg(self.key("version")))
                .await?,
        )?;
        Ok(v.unwrap_or(0))
    }

    /// The domains that have overrides.
    pub async fn domains(&self) -> Result<Vec<String>, Error> {
        parse(
            self.store
                .query(redis::cmd("SMEMBERS").arg(self.key("domains")))
                .await?,
        )
    }

    /// A page of `domain`'s records (`HSCAN` from `cursor`, about `count`): the next
    /// cursor (0: done) and the records.
    pub async fn scan(
        &self,
        domain: &str,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<String>), Error> {
        let mut cmd = redis::cmd("HSCAN");
        cmd.arg(self.domain_key(domain))
            .arg(cursor)
            .arg("COUNT")
            .arg(count);
        let (next, fields): (u64, Vec<(String, String)>) = parse(self.store.query(&cmd).await?)?;
        Ok((next, fields.into_iter().map(|(_, r)| r).collect()))
    }

    /// The log's changes `start..=end`, newest first.
    pub async fn log(&self, start: usize, end: usize) -> Result<Vec<String>, Error> {
        parse(
            self.store
                .query(
                    redis::cmd("LRANGE")
                        .arg(self.key("log"))
                        .arg(start)
                        .arg(end),
                )
                .await?,
        )
    }

    /// Writes `w` in one script call: its version and the change logged (`None`: a
    /// path removed that had no override; nothing changed).
    pub async fn write(&self, w: &Write<'_>) -> Result<Option<(u64, String)>, Error> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(WRITE)
            .arg(4)
            .arg(self.domain_key(w.domain))
            .arg(self.key("version"))
            .arg(self.key("domains"))
            .arg(self.key("log"))
            .arg(w.path)
            .arg(w.record.unwrap_or(""))
            .arg(w.by)
            .arg(w.at_ms)
            .arg(w.domain)
            .arg(w.log_max);
        let (version, change): (u64, Option<String>) = parse(self.store.query(&cmd).await?)?;
        Ok(change.filter(|_| version > 0).map(|c| (version, c)))
    }
}
