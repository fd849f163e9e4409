//! The store URL, parsed: which of the three kinds of deployment to connect to, as
//! redis-rs connection settings, with the credentials and TLS of [`Access`] applied
//! and the password kept out of every error message.
//!
//! URLs:
//! - `redis://[user:pass@]host:port[/db]`, `rediss://…` (TLS), `unix:///path/redis.sock`
//!   or `redis+unix:///path`
//! - `redis+cluster://[user:pass@]host:port,host:port,…` (seed nodes; `rediss+cluster` for TLS)
//! - `redis+sentinel://[user:pass@]host:port,host:port,…/master_name[/db]`
//!   (`user:pass` is for the master; sentinels use [`Access`]'s sentinel credentials;
//!   `rediss+sentinel` speaks TLS to the sentinels and the master alike)

use redis::{
    Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo,
    TlsCertificates,
};

use crate::Error;
use crate::access::Access;
use crate::tls::Verify;

/// A parsed store URL.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Standalone(ConnectionInfo),
    Cluster(Vec<ConnectionInfo>),
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        /// The master's database and credentials.
        redis: RedisConnectionInfo,
        tls: bool,
    },
}

/// TLS as connections are built with it: the files' contents and how much to verify.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tls {
    pub(crate) certs: Option<TlsCertificates>,
    pub(crate) verify: Verify,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, Error> {
        let bad = |why: &str| Error::InvalidUrl(format!("`{}`: {why}", redact(url)));
        let info = |u: String| u.into_connection_info().map_err(|e| bad(&e.to_string()));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected a URL like redis://host:port"))?;
        match scheme {
            "redis" | "rediss" | "unix" | "redis+unix" => {
                Ok(Target::Standalone(info(url.to_owned())?))
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
                    .map(|h| {
                        let h = check_host(h).map_err(|e| bad(&e))?;
                        info(format!("{base}://{auth}{h}"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Target::Cluster(nodes))
            }
            "redis+sentinel" | "rediss+sentinel" => {
                let tls = scheme == "rediss+sentinel";
                let base = if tls { "rediss" } else { "redis" };
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
                    .map(|h| {
                        let h = check_host(h).map_err(|e| bad(&e))?;
                        info(format!("{base}://{h}"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                // The master's settings (database, credentials) come from a redis:// URL.
                let db = db.map_or(String::new(), |d| format!("/{d}"));
                let redis = info(format!("redis://{auth}placeholder:6379{db}"))?
                    .redis_settings()
                    .clone();
                Ok(Target::Sentinel {
                    sentinels,
                    master: master.to_owned(),
                    redis,
                    tls,
                })
            }
            other => Err(bad(&format!(
                "unknown scheme `{other}` (expected redis, rediss, unix, redis+cluster, \
                 rediss+cluster, redis+sentinel or rediss+sentinel)"
            ))),
        }
    }

    /// Whether connections use TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Target::Standalone(info) => is_tls(info),
            Target::Cluster(nodes) => nodes.iter().any(is_tls),
            Target::Sentinel { tls, .. } => *tls,
        }
    }

    /// The target with `access` applied: its credentials over the URL's, and its TLS
    /// (which needs a TLS URL: settings that cannot be honoured are refused, never
    /// dropped).
    pub(crate) fn with_access(self, access: &Access) -> Result<(Target, Tls), Error> {
        if access.tls.is_set() && !self.is_tls() {
            return Err(Error::InvalidSetting(
                "TLS settings are given but the store URL is not TLS: use rediss://, \
                 rediss+cluster:// or rediss+sentinel://"
                    .into(),
            ));
        }
        let tls = Tls {
            certs: if self.is_tls() {
                access.tls.load()?
            } else {
                None
            },
            verify: access.tls.verify,
        };
        let login = |info: RedisConnectionInfo| access.apply(info);
        let target = match self {
            Target::Standalone(info) => {
                let redis = login(info.redis_settings().clone());
                Target::Standalone(info.set_redis_settings(redis))
            }
            Target::Cluster(nodes) => Target::Cluster(
                nodes
                    .into_iter()
                    .map(|n| {
                        let redis = login(n.redis_settings().clone());
                        n.set_redis_settings(redis)
                    })
                    .collect(),
            ),
            Target::Sentinel {
                sentinels,
                master,
                redis,
                tls,
            } => Target::Sentinel {
                sentinels: sentinels
                    .into_iter()
                    .map(|s| {
                        let redis = access.apply_sentinel(s.redis_settings().clone());
                        s.set_redis_settings(redis)
                    })
                    .collect(),
                master,
                redis: login(redis),
                tls,
            },
        };
        Ok((target, tls))
    }
}

impl Tls {
    /// `info` with these certificates and this verification, when it is a TLS address.
    pub(crate) fn apply(&self, info: ConnectionInfo) -> Result<ConnectionInfo, Error> {
        if !is_tls(&info) {
            return Ok(info);
        }
        let info = match &self.certs {
            Some(certs) => Client::build_with_tls(info, certs.clone())
                .map_err(|e| Error::Tls(e.to_string()))?
                .get_connection_info()
                .clone(),
            None => info,
        };
        let mut addr = info.addr().clone();
        match self.verify {
            Verify::Full => {}
            Verify::ChainOnly => addr.set_danger_accept_invalid_hostnames(true),
            Verify::Insecure => {
                if let ConnectionAddr::TcpTls { insecure, .. } = &mut addr {
                    *insecure = true;
                }
            }
        }
        Ok(info.set_addr(addr))
    }
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
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

/// The URL with any password replaced by `***`, for messages, logs and `Debug`: the
/// login's (`redis://user:secret@host`, every node of a cluster URL) and a query's
/// `pass=` / `password=` (`unix:///run/redis.sock?pass=secret`).
pub fn redact(url: &str) -> String {
    let (url, query) = match url.split_once('?') {
        Some((url, query)) => (url, Some(query)),
        None => (url, None),
    };
    let mut out = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    };
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name == "pass" || name == "password" => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(info: &ConnectionInfo) -> String {
        match info.addr() {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => {
                format!("{h}:{p}")
            }
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn passwords_are_redacted_wherever_a_url_has_one() {
        for (url, shown) in [
            ("redis://u:pw@h:1/0", "redis://u:***@h:1/0"),
            ("rediss://:pw@h:1", "rediss://:***@h:1"),
            ("redis://h:1", "redis://h:1"),
            ("redis://user@h:1", "redis://user@h:1"),
            (
                "redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001",
                "redis+cluster://u:***@10.0.0.1:7000,10.0.0.2:7001",
            ),
            (
                "unix:///run/redis.sock?db=2&pass=secret",
                "unix:///run/redis.sock?db=2&pass=***",
            ),
            (
                "unix:///run/redis.sock?user=u&password=secret",
                "unix:///run/redis.sock?user=u&password=***",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn parses_every_kind_of_url() {
        let Target::Standalone(info) = Target::parse("redis://127.0.0.1:7000/2").unwrap() else {
            panic!()
        };
        assert_eq!(
            (host(&info), info.redis_settings().db()),
            ("127.0.0.1:7000".into(), 2)
        );
        assert!(matches!(
            Target::parse("unix:///tmp/redis.sock").unwrap(),
            Target::Standalone(_)
        ));
        let Target::Cluster(nodes) =
            Target::parse("rediss+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001").unwrap()
        else {
            panic!()
        };
        assert_eq!(nodes.len(), 2);
        assert_eq!(host(&nodes[1]), "10.0.0.2:7001");
        assert!(nodes.iter().all(is_tls));
        assert_eq!(nodes[0].redis_settings().password(), Some("p"));
        let Target::Sentinel {
            sentinels,
            master,
            redis,
            tls,
        } = Target::parse("redis+sentinel://:pw@s1:26379,s2:26379/mymaster/3").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            sentinels.iter().map(host).collect::<Vec<_>>(),
            ["s1:26379", "s2:26379"]
        );
        assert!(
            sentinels
                .iter()
                .all(|s| s.redis_settings().password().is_none())
        );
        assert_eq!(master, "mymaster");
        assert_eq!((redis.db(), redis.password()), (3, Some("pw")));
        assert!(!tls);
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
        let e = err("rediss://user:secret@a:notaport");
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn tls_settings_on_a_plaintext_url_are_refused() {
        let access = Access {
            tls: crate::tls::TlsOptions {
                verify: Verify::ChainOnly,
                ..Default::default()
            },
            ..Access::default()
        };
        let e = Target::parse("redis://a:1")
            .unwrap()
            .with_access(&access)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not TLS: use rediss://"), "{e}");
        assert!(
            Target::parse("rediss://a:1")
                .unwrap()
                .with_access(&access)
                .is_ok()
        );
    }
}
