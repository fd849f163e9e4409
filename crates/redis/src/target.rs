//! The store URL, parsed: which of the three kinds of deployment to connect to, with
//! the password kept out of every error message.
//!
//! URLs:
//! - `redis://[user:pass@]host:port[/db]`, `rediss://…` (TLS), `unix:///path/redis.sock`
//!   or `redis+unix:///path`
//! - `redis+cluster://[user:pass@]host:port,host:port,…` (seed nodes; `rediss+cluster` for TLS)
//! - `redis+sentinel://[user:pass@]host:port,host:port,…/master_name[/db]`
//!   (`user:pass` is for the master; sentinels are asked without it)

use redis::IntoConnectionInfo;

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
