//! Setting values as a settings file and the reference's environment variables write
//! them: addresses, durations, booleans, ratios, log formats, and the reference's Redis
//! variables as one URL.

use std::net::SocketAddr;
use std::path::PathBuf;

use spillway_redis::{Access, Password, Verify};

pub(super) fn default_reference_headers() -> [String; 3] {
    [
        "RateLimit-Limit".into(),
        "RateLimit-Remaining".into(),
        "RateLimit-Reset".into(),
    ]
}

/// The reference's Redis settings as one Redis URL: `REDIS_TYPE` single (`host:port` or
/// a socket path with `REDIS_SOCKET_TYPE=unix`), sentinel (`master,host:port,...`) or
/// cluster (`host:port,...`), `REDIS_TLS`. A value that already is a URL is used as it
/// is. (Credentials stay out of the URL: see [`redis_access`].)
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

/// The reference's Redis credentials and TLS files applied to `access`: `REDIS_AUTH`
/// and `REDIS_SENTINEL_AUTH` (`password` or `user:password`), `REDIS_TLS_CACERT`,
/// `REDIS_TLS_CLIENT_CERT`, `REDIS_TLS_CLIENT_KEY`, `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`.
/// Names the variable that is wrong.
pub(super) fn redis_access(
    access: &mut Access,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let login = |v: String| match v.split_once(':') {
        Some((user, password)) => (Some(user.to_owned()), Password::new(password)),
        None => (None, Password::new(v)),
    };
    if let Some(auth) = var("REDIS_AUTH").filter(|a| !a.is_empty()) {
        let (user, password) = login(auth);
        access.username = user.or(access.username.take());
        access.password = Some(password);
    }
    if let Some(auth) = var("REDIS_SENTINEL_AUTH").filter(|a| !a.is_empty()) {
        let (user, password) = login(auth);
        access.sentinel_username = user.or(access.sentinel_username.take());
        access.sentinel_password = Some(password);
    }
    let file = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(ca) = file("REDIS_TLS_CACERT") {
        access.tls.ca_file = Some(ca);
    }
    if let Some(cert) = file("REDIS_TLS_CLIENT_CERT") {
        access.tls.client_cert = Some(cert);
    }
    if let Some(key) = file("REDIS_TLS_CLIENT_KEY") {
        access.tls.client_key = Some(key);
    }
    if let Some(v) = var("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
        && boolean(&v).map_err(|e| format!("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: {e}"))?
    {
        access.tls.verify = Verify::ChainOnly;
    }
    Ok(())
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
