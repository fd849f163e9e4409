//! The reference service's variables that Spillway does not honour, and why: `serve`
//! names each one that is set in a warning (docs/envoy.md lists them too); and reading the
//! reference's variables into [`Settings`].

use std::net::SocketAddr;
use std::path::Path;

use super::value::{
    addr, boolean, default_reference_headers, log_format, ratio, redis_access, redis_url,
};
use super::{Settings, SettingsError};

/// The reference's variables Spillway reads but does not act on, or does not read, each
/// with why: `serve` logs a warning for each one that is set. (Prefixes end in `_`.)
pub const NOT_HONOURED: &[(&str, &str)] = &[
    (
        "BACKEND_TYPE",
        "counters live in Redis or in memory (--store); there is no memcache backend",
    ),
    ("MEMCACHE_", "there is no memcache backend"),
    (
        "REDIS_PERSECOND",
        "one store holds every counter; there is no per-second Redis",
    ),
    (
        "REDIS_PERSECOND_",
        "one store holds every counter; there is no per-second Redis",
    ),
    (
        "REDIS_POOL_SIZE",
        "one multiplexed connection per Redis node; there is no pool",
    ),
    (
        "REDIS_PIPELINE_",
        "each decision is one script call; calls are coalesced without a window",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "each Cluster node has its own connection",
    ),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "there is no pool"),
    (
        "REDIS_TIMEOUT",
        "use --store-timeout (default 10ms; the reference's 10s would outlast Envoy's deadline)",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "/readyz and the gRPC health service PING the store",
    ),
    (
        "REDIS_STARTUP_",
        "the store is waited for with its own backoff (1 s doubling to 30 s, forever)",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "keys expire when their window ends; there is no jitter",
    ),
    (
        "USE_STATSD",
        "metrics are Prometheus at /metrics on the HTTP port",
    ),
    (
        "STATSD_",
        "metrics are Prometheus at /metrics on the HTTP port",
    ),
    (
        "USE_DOG_STATSD",
        "metrics are Prometheus at /metrics on the HTTP port",
    ),
    ("EXTRA_TAGS", "metrics carry no extra labels"),
    (
        "STATS_FLUSH_INTERVAL",
        "Prometheus metrics are read when scraped",
    ),
    ("DISABLE_STATS", "metrics are always on"),
    ("TRACING_", "there is no tracing export"),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "there is no tracing export (Envoy Gateway sets it with TRACING_*)",
    ),
    ("GRPC_UDS", "gRPC listens on TCP only"),
    (
        "PROMETHEUS_MAPPER_YAML",
        "metrics have Spillway's own names (spillway_*); there is no statsd mapping",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "durations are in seconds, as Prometheus names them",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "the xDS backoff doubles from its initial to its maximum interval, without jitter",
    ),
    (
        "XDS_CLIENT_BACKOFF_JITTER",
        "the xDS backoff doubles from its initial to its maximum interval, without jitter",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE",
        "connections are kept until the client closes them",
    ),
    (
        "USE_DOG_STATSD_MOGRIFIERS",
        "metrics are Prometheus at /metrics on the HTTP port",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "connections are kept until the client closes them",
    ),
    ("PROTO", "Spillway listens on TCP only"),
    (
        "RUNTIME_IGNOREDOTFILES",
        "files whose names start with a dot are always skipped",
    ),
];

/// Variables honoured at one value only (the one Spillway always behaves as): set to
/// it, they are not named.
const HONOURED_AT: &[(&str, &str)] = &[
    ("PROTO", "tcp"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("USE_STATSD", "false"),
];

/// The reference variables that are set (name, value) and that Spillway does not
/// honour, with why.
pub fn not_honoured(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, &'static str)> {
    let mut found: Vec<(String, &'static str)> = vars
        .into_iter()
        .filter(|(name, value)| {
            !HONOURED_AT
                .iter()
                .any(|(n, v)| n == name && value.eq_ignore_ascii_case(v))
        })
        .filter_map(|(name, _)| {
            let (_, why) = NOT_HONOURED.iter().find(|(n, _)| {
                if n.ends_with('_') {
                    name.starts_with(n)
                } else {
                    name == *n
                }
            })?;
            Some((name, *why))
        })
        .collect();
    found.sort();
    found
}

impl Settings {
    /// Applies the reference service's environment variables that are set.
    pub fn apply_reference_env(
        &mut self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<(), SettingsError> {
        let env_err = |name: &str, e: String| SettingsError(format!("{name}: {e}"));
        if let Some(url) = var("REDIS_URL").filter(|u| !u.is_empty()) {
            self.store = redis_url(&url, &var).map_err(|e| env_err("REDIS_URL", e))?;
        }
        redis_access(&mut self.redis, &var).map_err(SettingsError)?;
        if var("RUNTIME_ROOT").is_some() || var("RUNTIME_SUBDIRECTORY").is_some() {
            let root = var("RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".into());
            let sub = var("RUNTIME_SUBDIRECTORY").unwrap_or_default();
            let app = var("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into());
            self.config = Path::new(&root).join(sub).join(app);
        }
        // The reference listens on every interface by default; so does a deployment of it.
        let listen =
            |host: &str, port: &str, current: SocketAddr| -> Result<SocketAddr, SettingsError> {
                match (var(host), var(port)) {
                    (None, None) => Ok(current),
                    (h, p) => {
                        let h = h.unwrap_or_else(|| "0.0.0.0".into());
                        let p = p.map_or(Ok(current.port()), |p| {
                            p.parse::<u16>().map_err(|e| env_err(port, e.to_string()))
                        })?;
                        addr(&format!("{h}:{p}")).map_err(|e| env_err(host, e))
                    }
                }
            };
        self.http_addr = listen("HOST", "PORT", self.http_addr)?;
        self.grpc_addr = listen("GRPC_HOST", "GRPC_PORT", self.grpc_addr)?;
        self.apply_serving_env(&var)?;
        let prometheus = var("USE_PROMETHEUS")
            .map(|v| boolean(&v).map_err(|e| env_err("USE_PROMETHEUS", e)))
            .transpose()?;
        if prometheus == Some(true) {
            let at = var("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
            self.metrics_addr = Some(addr(&at).map_err(|e| env_err("PROMETHEUS_ADDR", e))?);
            if let Some(path) = var("PROMETHEUS_PATH").filter(|p| p.starts_with('/')) {
                self.metrics_path = path;
            }
        }
        self.apply_xds_env(&var)?;
        if let Some(v) = var("LOG_LEVEL") {
            self.log_level = v.to_ascii_lowercase();
        }
        if let Some(v) = var("LOG_FORMAT") {
            self.log_json = log_format(&v).map_err(|e| env_err("LOG_FORMAT", e))?;
        }
        if let Some(v) = var("SHADOW_MODE") {
            self.shadow_mode = boolean(&v).map_err(|e| env_err("SHADOW_MODE", e))?;
        }
        if let Some(v) = var("QUOTA_MODE") {
            self.quota_mode = boolean(&v).map_err(|e| env_err("QUOTA_MODE", e))?;
        }
        if let Some(v) = var("NEAR_LIMIT_RATIO") {
            let r = v
                .parse::<f64>()
                .map_err(|e| env_err("NEAR_LIMIT_RATIO", e.to_string()))?;
            self.near_limit_ratio = ratio(r).map_err(|e| env_err("NEAR_LIMIT_RATIO", e))?;
        }
        if let Some(v) = var("LOCAL_CACHE_SIZE_IN_BYTES") {
            self.deny_cache_bytes = v
                .parse::<usize>()
                .map_err(|e| env_err("LOCAL_CACHE_SIZE_IN_BYTES", e.to_string()))?;
            // The reference's cache answers its own rules: so does this one, when asked
            // for by the reference's variable.
            self.reference_local_cache = self.deny_cache_bytes > 0;
        }
        if let Some(v) = var("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
            self.stop_increment_when_over_limit =
                boolean(&v).map_err(|e| env_err("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", e))?;
        }
        if let Some(v) = var("RESPONSE_DYNAMIC_METADATA") {
            self.dynamic_metadata =
                boolean(&v).map_err(|e| env_err("RESPONSE_DYNAMIC_METADATA", e))?;
        }
        if let Some(v) = var("MERGE_DOMAIN_CONFIG") {
            self.merge_domains = boolean(&v).map_err(|e| env_err("MERGE_DOMAIN_CONFIG", e))?;
        }
        if let Some(v) = var("CACHE_KEY_PREFIX") {
            self.key_prefix = v;
        }
        if let Some(v) = var("LIMIT_RESPONSE_HEADERS_ENABLED") {
            let on = boolean(&v).map_err(|e| env_err("LIMIT_RESPONSE_HEADERS_ENABLED", e))?;
            self.reference_headers = on.then(|| {
                let [l, r, t] = default_reference_headers();
                [
                    var("LIMIT_LIMIT_HEADER").unwrap_or(l),
                    var("LIMIT_REMAINING_HEADER").unwrap_or(r),
                    var("LIMIT_RESET_HEADER").unwrap_or(t),
                ]
            });
        }
        Ok(())
    }
}
