//! Setting values as a settings file and the reference's environment variables write
//! them: addresses, durations, booleans, ratios, log formats, and the reference's Redis
//! variables as one URL.

use std::net::SocketAddr;

pub(super) fn default_reference_headers() -> [String; 3] {
    [
        "RateLimit-Limit".into(),
        "RateLimit-Remaining".into(),
        "RateLimit-Reset".into(),
    ]
}

/// The reference's Redis settings as one Redis URL: `REDIS_TYPE` single (`host:port` or
/// a socket path with `REDIS_SOCKET_TYPE=unix`), sentinel (`master,host:port,...`) or
/// cluster (`host:port,...`), `REDIS_AUTH` (`password` or `user:password`), `REDIS_TLS`.
/// A value that already is a URL is used as it is.
pub(super) fn redis_url(
    url: &str,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    if url.contains("://") {
        return Ok(url.to_owned());
    }
    let kind = var("REDIS_TYPE")
        .unwrap_or_else(|| "single".into())
        .to_ascii_lowercase();
    let tls = var("REDIS_TLS").is_some_and(|v| boolean(&v).unwrap_or(false));
    let auth = var("REDIS_AUTH")
        .filter(|a| !a.is_empty())
        .map(|a| {
            if a.contains(':') {
                format!("{a}@")
            } else {
                format!(":{a}@")
            }
        })
        .unwrap_or_default();
    let unix = var("REDIS_SOCKET_TYPE").is_none_or(|t| t.eq_ignore_ascii_case("unix"))
        && url.starts_with('/');
    Ok(match kind.as_str() {
        "single" if unix => format!("unix://{url}"),
        "single" => format!("{}://{auth}{url}", if tls { "rediss" } else { "redis" }),
        "cluster" => format!(
            "{}://{auth}{url}",
            if tls {
                "rediss+cluster"
            } else {
                "redis+cluster"
            }
        ),
        "sentinel" => {
            let (master, nodes) = url
                .split_once(',')
                .ok_or_else(|| format!("`{url}` is not `mastername,host:port,...`"))?;
            format!(
                "{}://{auth}{nodes}/{master}",
                if tls {
                    "rediss+sentinel"
                } else {
                    "redis+sentinel"
                }
            )
        }
        other => {
            return Err(format!(
                "REDIS_TYPE `{other}` is not single, sentinel or cluster"
            ));
        }
    })
}

/// `host:port` (or `:port`, for every interface).
pub fn addr(s: &str) -> Result<SocketAddr, String> {
    let s = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    s.parse::<SocketAddr>()
        .map_err(|_| format!("`{s}` is not an address like 127.0.0.1:8080"))
}

/// A duration like `10ms`, `2s`, `1m`: the policies' parser.
pub use spillway_policy::duration::parse as duration;

pub(super) fn boolean(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        other => Err(format!("`{other}` is not true or false")),
    }
}

pub(super) fn ratio(r: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("{r} is not between 0 and 1"))
    }
}

/// `text` or `json`: whether logs are JSON.
pub fn log_format(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "json" => Ok(true),
        "text" => Ok(false),
        other => Err(format!("`{other}` is not text or json")),
    }
}
