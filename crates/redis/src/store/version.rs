//! The server's version, read once when a store connects (`INFO server`): Spillway
//! runs on Redis 6.2 or later and on every Valkey; an older Redis is refused with what
//! it lacks. Where the server hides its version (an ACL without `INFO`, a proxy that
//! answers something else), the store connects and the probe round finds what fails.

use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::connection::Connection;

use super::stats::text_of;

/// The oldest Redis Spillway runs on (Valkey reports itself as Redis 7.2, so every
/// Valkey passes).
pub const MIN_REDIS: Version = Version(6, 2, 0);

/// What an older Redis lacks: the reason for [`MIN_REDIS`].
pub(crate) const WHY_MIN: &str = "a reservation takes its record back with GETDEL (Redis 6.2), \
     and the decision code writes with SET … KEEPTTL (6.0)";

/// A `major.minor.patch` version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `7.0.15` (and `255.255.255`, an unstable build); `None` for anything else.
    pub fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().splitn(3, '.').map(|p| p.parse::<u32>().ok());
        Some(Version(parts.next()??, parts.next()??, parts.next()??))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The server a store is connected to, as `INFO server` says (on a Cluster, the oldest
/// node's).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Server {
    /// `redis` or `valkey` (`server_name`; `redis` where the field is absent).
    pub name: String,
    /// Its own version: `valkey_version` on Valkey, `redis_version` elsewhere.
    pub version: Version,
    /// The Redis version it answers as (`redis_version`; 7.2.4 on every Valkey 8).
    pub redis_version: Version,
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.version)
    }
}

impl Server {
    /// The server `INFO server`'s text describes; `None` without a `redis_version`.
    pub fn from_info(info: &str) -> Option<Server> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
        };
        let redis_version = Version::parse(field("redis_version")?)?;
        let name = field("server_name").unwrap_or("redis").to_owned();
        let version = field("valkey_version")
            .and_then(Version::parse)
            .unwrap_or(redis_version);
        Some(Server {
            name,
            version,
            redis_version,
        })
    }

    /// Why Spillway cannot run on it; `None` when it can.
    pub fn too_old(&self) -> Option<String> {
        (self.redis_version < MIN_REDIS).then(|| {
            format!(
                "it is {self}, and Spillway needs Redis {}.{} or later (or Valkey): {WHY_MIN}",
                MIN_REDIS.0, MIN_REDIS.1
            )
        })
    }
}

/// `INFO server`, read once within `timeout`: the server, or the oldest node of a
/// Cluster. `None` when no version could be read (refused, unanswered, not Redis's
/// form): the store's probe round finds what fails then.
pub(super) async fn read(connection: &Connection, timeout: Duration) -> Option<Server> {
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let reply = tokio::time::timeout(timeout, connection.query(&info))
        .await
        .ok()?
        .ok()?;
    let servers: Vec<Server> = match reply {
        // One reply per node on Cluster.
        Value::Map(nodes) => nodes
            .iter()
            .filter_map(|(_, v)| Server::from_info(&text_of(v)))
            .collect(),
        other => Server::from_info(&text_of(&other)).into_iter().collect(),
    };
    servers.into_iter().min_by_key(|s| s.redis_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS_70: &str =
        "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n";
    const VALKEY_8: &str =
        "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n";

    #[test]
    fn info_server_names_the_server_and_its_versions() {
        let redis = Server::from_info(REDIS_70).unwrap();
        assert_eq!(
            (redis.name.as_str(), redis.version),
            ("redis", Version(7, 0, 15))
        );
        assert_eq!(redis.to_string(), "redis 7.0.15");
        assert_eq!(redis.too_old(), None);
        let valkey = Server::from_info(VALKEY_8).unwrap();
        assert_eq!(valkey.to_string(), "valkey 8.1.8");
        assert_eq!(valkey.redis_version, Version(7, 2, 4));
        assert_eq!(valkey.too_old(), None);
        for not_info in ["OK", "", "redis_version:seven", "redis_version:7.0"] {
            assert_eq!(Server::from_info(not_info), None, "{not_info}");
        }
    }

    #[test]
    fn redis_before_6_2_is_too_old_and_says_why() {
        let at = |v: &str| Server::from_info(&format!("redis_version:{v}\n")).unwrap();
        assert_eq!(at("6.2.0").too_old(), None);
        assert_eq!(at("6.2.14").too_old(), None);
        assert_eq!(at("255.255.255").too_old(), None);
        for old in ["6.0.16", "5.0.14", "6.1.9"] {
            let why = at(old).too_old().unwrap();
            assert!(
                why.contains(old) && why.contains("6.2") && why.contains("GETDEL"),
                "{why}"
            );
        }
    }
}
