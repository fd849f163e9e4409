//! Setting values as every source writes them: addresses, durations, booleans, numbers,
//! ratios, lists, log formats; and the reference's Redis variables as one URL.

use std::net::SocketAddr;

use spillway_redis::Verify;

/// The reference's Redis settings as one Redis URL: `REDIS_TYPE` single (`host:port` or
/// a socket path with `REDIS_SOCKET_TYPE=unix`), sentinel (`master,host:port,...`) or
/// cluster (`host:port,...`), `REDIS_TLS`. A value that already is a URL is used as it
/// is. (Credentials stay out of the URL: `REDIS_AUTH` sets `redis_username` and
/// `redis_password`.)
pub fn redis_url(url: &str, var: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    if url.contains("://") {
        return Ok(url.to_owned());
    }
    let kind = var("REDIS_TYPE")
        .unwrap_or_else(|| "single".into())
        .to_ascii_lowercase();
    let tls = match var("REDIS_TLS") {
        Some(v) => boolean(&v).map_err(|e| format!("REDIS_TLS: {e}"))?,
        None => false,
    };
    let s = if tls { "s" } else { "" };
    let unix = var("REDIS_SOCKET_TYPE").is_none_or(|t| t.eq_ignore_ascii_case("unix"))
        && url.starts_with('/');
    Ok(match kind.as_str() {
        "single" if unix => format!("unix://{url}"),
        "single" => format!("redis{s}://{url}"),
        "cluster" => format!("redis{s}+cluster://{url}"),
        "sentinel" => {
            let (master, nodes) = url
                .split_once(',')
                .ok_or_else(|| format!("`{url}` is not `mastername,host:port,...`"))?;
            format!("redis{s}+sentinel://{nodes}/{master}")
        }
        other => {
            return Err(format!(
                "REDIS_TYPE `{other}` is not single, sentinel or cluster"
            ));
        }
    })
}

/// `full`, `chain` or `none`: how much of Redis's certificate to verify.
pub fn verify(s: &str) -> Result<Verify, String> {
    match s.to_ascii_lowercase().as_str() {
        "full" => Ok(Verify::Full),
        "chain" => Ok(Verify::ChainOnly),
        "none" => Ok(Verify::Insecure),
        other => Err(format!("`{other}` is not full, chain or none")),
    }
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

/// The store's window ([`duration`]), refused past [`spillway_redis::MAX_WINDOW`].
pub fn store_window(s: &str) -> Result<std::time::Duration, String> {
    let d = duration(s)?;
    if d > spillway_redis::MAX_WINDOW {
        return Err(format!(
            "a window of `{s}`: at most {} (each decision that opens a store call waits it out)",
            spillway_policy::duration::format(spillway_redis::MAX_WINDOW)
        ));
    }
    Ok(d)
}

/// [`duration`], refused when 0: `what` must be above 0.
pub fn duration_above_zero(s: &str, what: &str) -> Result<std::time::Duration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err(format!("{what} must be above 0"));
    }
    Ok(d)
}

/// `true` or `false` (also 1/0, yes/no, on/off; empty is false).
pub fn boolean(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        other => Err(format!("`{other}` is not true or false")),
    }
}

/// A number from 0 to 1.
pub fn ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number from 0 to 1"))?;
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("{r} is not between 0 and 1"))
    }
}

/// A number above 0, up to 1: the failed part of a window's calls that opens the breaker.
pub fn breaker_ratio(s: &str) -> Result<f64, String> {
    let r = ratio(s)?;
    if r > 0.0 {
        Ok(r)
    } else {
        Err("0 would open the breaker with no failure: give a ratio above 0".into())
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

/// A whole number.
pub fn number<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number in range"))
}

/// A webhook's URL: `http://` or `https://` and a host (empty is none).
pub fn webhook(s: &str) -> Result<Option<String>, String> {
    let Some(url) = optional(s) else {
        return Ok(None);
    };
    match url.parse::<hyper::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(Some(url.to_owned()))
        }
        _ => Err(format!("`{url}` is not an http:// or https:// URL")),
    }
}

/// Empty is none.
pub fn optional(s: &str) -> Option<&str> {
    let s = s.trim();
    (!s.is_empty()).then_some(s)
}

/// `a,b,c` (items trimmed, empty ones dropped).
pub fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `off` (or `none`, or empty) turns the admin listener off; anything else is an address.
pub fn admin_addr(v: &str) -> Result<Option<SocketAddr>, String> {
    match v.trim() {
        "off" | "none" | "" => Ok(None),
        other => addr(other).map(Some),
    }
}

/// `k=v,k=v` (node metadata) or `k:v,k:v` (headers) as pairs.
pub fn pairs(list: &str, separator: char) -> Result<Vec<(String, String)>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.split_once(separator)
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| format!("`{p}` is not key{separator}value"))
        })
        .collect()
}

/// `udp` or `tcp`: whether statsd lines go over TCP.
pub fn statsd_protocol(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "udp" => Ok(false),
        "tcp" => Ok(true),
        other => Err(format!("`{other}` is not udp or tcp")),
    }
}

/// DogStatsD renames as JSON (empty: none); each pattern must compile.
pub fn mogrifiers(s: &str) -> Result<Vec<super::Mogrifier>, String> {
    let Some(s) = optional(s) else {
        return Ok(Vec::new());
    };
    let list: Vec<super::Mogrifier> =
        serde_json::from_str(s).map_err(|e| format!("not a list of mogrifiers: {e}"))?;
    for m in &list {
        regex::Regex::new(&m.pattern)
            .map_err(|e| format!("mogrifier pattern `{}`: {e}", m.pattern))?;
        if m.name.is_empty() {
            return Err(format!("mogrifier `{}` has no name", m.pattern));
        }
    }
    Ok(list)
}

/// `http` or `grpc` (`http/protobuf` too, as OpenTelemetry's variables write it).
pub fn otlp_protocol(s: &str) -> Result<super::OtlpProtocol, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "http" | "http/protobuf" => Ok(super::OtlpProtocol::Http),
        "grpc" => Ok(super::OtlpProtocol::Grpc),
        other => Err(format!("`{other}` is not http or grpc")),
    }
}
