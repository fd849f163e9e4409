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

/// Changes of one domain, in order, by one author at one time: each path's record set
/// (or the path removed), the version counted, the domain listed (or unlisted once
/// empty), the change logged with what it replaced
/// (`{"version":V,"by":…,"at_ms":…,"before":…,"after":…}`). `ARGV`: the author (a
/// JSON string), the time, the domain, the log's length, then a path and its record
/// (empty: removed) for each change. Removing a path that has no override changes
/// nothing. Answers the changes made, in order.
const WRITE: &str = r#"
local made = {}
for i = 5, #ARGV, 2 do
  local path, record = ARGV[i], ARGV[i + 1]
  local before = redis.call('HGET', KEYS[1], path)
  if record ~= '' or before then
    local v = redis.call('INCR', KEYS[2])
    local after = 'null'
    if record ~= '' then
      after = '{"version":' .. v .. ',' .. string.sub(record, 2)
      redis.call('HSET', KEYS[1], path, after)
    else
      redis.call('HDEL', KEYS[1], path)
    end
    local change = '{"version":' .. v .. ',"by":' .. ARGV[1] .. ',"at_ms":' .. ARGV[2] ..
      ',"before":' .. (before or 'null') .. ',"after":' .. after .. '}'
    redis.call('LPUSH', KEYS[4], change)
    made[#made + 1] = change
  end
end
if redis.call('HLEN', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[3], ARGV[3])
else
  redis.call('SADD', KEYS[3], ARGV[3])
end
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[4]) - 1)
return made
"#;

/// Overrides in Redis, through a store (a connection of their own, say).
#[derive(Debug)]
pub struct OverrideKeys {
    store: RedisStore,
    /// `{prefix}{overrides}:`, every key's start.
    root: String,
}

/// Changes to write, in order: `domain`'s paths each set to a record (`None`: removed).
#[derive(Debug)]
pub struct Write<'a> {
    /// The domain whose hash holds the paths.
    pub domain: &'a str,
    /// Each path, as the field of the domain's hash, and its record: a JSON object
    /// without its version (the script adds it), or `None` to remove the path's.
    pub changes: &'a [(String, Option<String>)],
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

    /// Writes `w` in one script call: the changes made, in order, each with its
    /// version (a path removed that had no override makes none).
    pub async fn write(&self, w: &Write<'_>) -> Result<Vec<String>, Error> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(WRITE)
            .arg(4)
            .arg(self.domain_key(w.domain))
            .arg(self.key("version"))
            .arg(self.key("domains"))
            .arg(self.key("log"))
            .arg(w.by)
            .arg(w.at_ms)
            .arg(w.domain)
            .arg(w.log_max);
        for (path, record) in w.changes {
            cmd.arg(path).arg(record.as_deref().unwrap_or(""));
        }
        parse(self.store.query(&cmd).await?)
    }
}
