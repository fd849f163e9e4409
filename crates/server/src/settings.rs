//! Settings, from four places, later ones winning: defaults, a settings file (YAML),
//! the reference service's environment variables (so a deployment of envoyproxy/ratelimit
//! switches by changing the image), and the command line (which also reads `SPILLWAY_*`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use spillway_policy::OnStoreError;

use spillway_core::headers::HeaderStyle;

mod reference;
mod serving;
mod value;
mod xds;

pub use reference::{NOT_HONOURED, not_honoured};
pub use serving::{DEFAULT_ADMIN_ADDR, admin_addr};
pub use value::{addr, duration, log_format, verify};
use value::{boolean, default_reference_headers, ratio, redis_access, redis_url};
pub use xds::{Rules, pairs};

/// Everything `serve` needs to know.
#[derive(Clone, Debug)]
pub struct Settings {
    /// A policy file or directory.
    pub config: PathBuf,
    /// Where the live rules come from: `config`, or an xDS server.
    pub rules: Rules,
    /// With rules over xDS, ready before the first set arrives (serving none until it
    /// does); the reference's `FORCE_START_WITHOUT_INITIAL_CONFIG`.
    pub force_start_without_rules: bool,
    /// Not ready while no domain is loaded (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub ready_needs_a_domain: bool,
    /// Candidate policies decided in shadow beside the live ones, on counters of their
    /// own, answering nobody (`--candidate-config`).
    pub candidate_config: Option<PathBuf>,
    /// `memory`, or a Redis URL.
    pub store: String,
    /// TLS and credentials for a Redis store (passwords print as `***`).
    pub redis: spillway_redis::Access,
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    /// The admin listener (`/ui`, `/v1/top`, `/v1/config`, `/v1/explain`, `/rlconfig`);
    /// `None`: off.
    pub admin_addr: Option<SocketAddr>,
    /// A listener of its own for Prometheus (the reference's `USE_PROMETHEUS` with
    /// `PROMETHEUS_ADDR`), and the path it serves (`PROMETHEUS_PATH`); `/metrics` stays
    /// on the HTTP and admin listeners too.
    pub metrics_addr: Option<SocketAddr>,
    pub metrics_path: String,
    /// With it, the admin listener answers 401 (health aside) to a request without it.
    pub admin_token: Option<spillway_redis::Password>,
    /// The served certificate chain and key (PEM).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Client certificates from these CAs are required: mutual TLS.
    pub tls_client_ca: Option<PathBuf>,
    /// A client certificate must name one of these among its SANs.
    pub tls_client_sans: Vec<String>,
    /// Which listeners serve TLS; `None`: gRPC and HTTP when a certificate is given.
    pub tls_listeners: Option<crate::tls::TlsListeners>,
    /// Per store call; well under Envoy's 20 ms deadline.
    pub store_timeout: Duration,
    /// For rules without their own `on_store_error`.
    pub on_store_error: OnStoreError,
    /// The reference's `SHADOW_MODE`: never answer OVER_LIMIT overall.
    pub shadow_mode: bool,
    /// The reference's `QUOTA_MODE`: every reference rule is quota-mode.
    pub quota_mode: bool,
    pub near_limit_ratio: f64,
    /// `/v1/check`'s rate limit headers.
    pub headers: HeaderStyle,
    /// The reference's `LIMIT_RESPONSE_HEADERS_ENABLED` header names, when enabled.
    pub reference_headers: Option<[String; 3]>,
    /// `error`, `warn`, `info`, `debug`, `trace` (or a `tracing` filter).
    pub log_level: String,
    pub log_json: bool,
    /// Reload policies when the files change.
    pub watch: bool,
    pub breaker_failures: u32,
    pub breaker_cooldown: Duration,
    /// The deny cache's size in bytes (0: off); unused on the memory store. The
    /// reference's `LOCAL_CACHE_SIZE_IN_BYTES` sets it.
    pub deny_cache_bytes: usize,
    /// How long an HTTP client may take to send its first byte, then its headers, then
    /// its whole body (each; a slow client is closed, or answered 408 for its body).
    pub header_read_timeout: Duration,
    pub drain_timeout: Duration,
    /// Serve the console page at `/ui` (`--no-ui` turns it off).
    pub ui: bool,
    /// Written before every counter key (the reference's `CACHE_KEY_PREFIX`): services
    /// with different prefixes count apart in one store.
    pub key_prefix: String,
    /// Files that declare one domain make one domain (`MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// A request that one reference rule denies charges only the rules it is over,
    /// not the others (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub stop_increment_when_over_limit: bool,
    /// Responses carry the request and the passing rules' `metadata` as dynamic
    /// metadata (`RESPONSE_DYNAMIC_METADATA`).
    pub dynamic_metadata: bool,
    /// The deny cache also answers reference rules until their window ends, so their
    /// counters stop growing, as the reference's local cache does (set with its size by
    /// `LOCAL_CACHE_SIZE_IN_BYTES`).
    pub reference_local_cache: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            config: PathBuf::from("policies"),
            rules: Rules::Files,
            force_start_without_rules: false,
            ready_needs_a_domain: false,
            candidate_config: None,
            store: "memory".into(),
            redis: spillway_redis::Access::default(),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 8081)),
            admin_addr: Some(SocketAddr::from(DEFAULT_ADMIN_ADDR)),
            metrics_addr: None,
            metrics_path: "/metrics".into(),
            admin_token: None,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_client_sans: Vec::new(),
            tls_listeners: None,
            store_timeout: spillway_redis::DEFAULT_TIMEOUT,
            on_store_error: OnStoreError::Closed,
            shadow_mode: false,
            quota_mode: false,
            near_limit_ratio: 0.8,
            headers: HeaderStyle::Ietf,
            reference_headers: None,
            log_level: "info".into(),
            log_json: false,
            watch: true,
            breaker_failures: spillway_core::DEFAULT_FAILURES_TO_OPEN,
            breaker_cooldown: spillway_core::DEFAULT_COOLDOWN,
            deny_cache_bytes: spillway_core::DEFAULT_DENY_CACHE_BYTES,
            header_read_timeout: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(10),
            ui: true,
            key_prefix: String::new(),
            merge_domains: false,
            stop_increment_when_over_limit: false,
            dynamic_metadata: false,
            reference_local_cache: false,
        }
    }
}

/// The settings file: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    config: Option<PathBuf>,
    candidate_config: Option<PathBuf>,
    store: Option<String>,
    redis_tls_ca: Option<PathBuf>,
    redis_tls_cert: Option<PathBuf>,
    redis_tls_key: Option<PathBuf>,
    redis_tls_verify: Option<String>,
    redis_username: Option<String>,
    redis_password_file: Option<PathBuf>,
    redis_sentinel_username: Option<String>,
    redis_sentinel_password_file: Option<PathBuf>,
    http_addr: Option<String>,
    grpc_addr: Option<String>,
    admin_addr: Option<String>,
    admin_token_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    tls_client_san: Option<Vec<String>>,
    tls_listeners: Option<Vec<String>>,
    xds_server: Option<String>,
    xds_node_id: Option<String>,
    xds_tls_ca: Option<PathBuf>,
    xds_tls_cert: Option<PathBuf>,
    xds_tls_key: Option<PathBuf>,
    xds_tls_san: Option<String>,
    store_timeout: Option<String>,
    on_store_error: Option<String>,
    shadow_mode: Option<bool>,
    quota_mode: Option<bool>,
    near_limit_ratio: Option<f64>,
    headers: Option<String>,
    reference_headers: Option<bool>,
    log_level: Option<String>,
    log_format: Option<String>,
    watch: Option<bool>,
    breaker_failures: Option<u32>,
    breaker_cooldown: Option<String>,
    deny_cache_bytes: Option<usize>,
    header_read_timeout: Option<String>,
    drain_timeout: Option<String>,
    ui: Option<bool>,
    key_prefix: Option<String>,
    merge_domains: Option<bool>,
    stop_increment_when_over_limit: Option<bool>,
    dynamic_metadata: Option<bool>,
    reference_local_cache: Option<bool>,
}

/// A password file's first line; the error names the file, never the content.
pub fn password_file(path: &Path) -> Result<spillway_redis::Password, String> {
    spillway_redis::Password::from_file(path).map_err(|e| e.to_string())
}

/// A setting that could not be used; says which and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

impl Settings {
    /// How policy files are read.
    pub fn load_options(&self) -> spillway_policy::LoadOptions {
        spillway_policy::LoadOptions {
            merge_domains: self.merge_domains,
        }
    }

    /// Applies a settings file.
    pub fn apply_file(&mut self, path: &Path) -> Result<(), SettingsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SettingsError(format!("{}: cannot read: {e}", path.display())))?;
        let f: File = serde_saphyr::from_str(&text).map_err(|e| {
            SettingsError(format!(
                "{}: {}",
                path.display(),
                e.to_string().lines().next().unwrap_or("")
            ))
        })?;
        let at = |what: &str, e: String| SettingsError(format!("{}: {what}: {e}", path.display()));
        if let Some(v) = f.config {
            // Relative to the settings file, as a reader of the file would assume.
            self.config = path.parent().map_or(v.clone(), |dir| dir.join(&v));
        }
        if let Some(v) = f.candidate_config {
            self.candidate_config = Some(path.parent().map_or(v.clone(), |dir| dir.join(&v)));
        }
        if let Some(v) = f.store {
            self.store = v;
        }
        // Files named in the settings file are relative to it, as `config` is.
        let near = |v: PathBuf| path.parent().map_or(v.clone(), |dir| dir.join(&v));
        let redis = &mut self.redis;
        if let Some(v) = f.redis_tls_ca {
            redis.tls.ca_file = Some(near(v));
        }
        if let Some(v) = f.redis_tls_cert {
            redis.tls.client_cert = Some(near(v));
        }
        if let Some(v) = f.redis_tls_key {
            redis.tls.client_key = Some(near(v));
        }
        if let Some(v) = f.redis_tls_verify {
            redis.tls.verify = verify(&v).map_err(|e| at("redis_tls_verify", e))?;
        }
        if let Some(v) = f.redis_username {
            redis.username = Some(v);
        }
        if let Some(v) = f.redis_password_file {
            redis.password =
                Some(password_file(&near(v)).map_err(|e| at("redis_password_file", e))?);
        }
        if let Some(v) = f.redis_sentinel_username {
            redis.sentinel_username = Some(v);
        }
        if let Some(v) = f.redis_sentinel_password_file {
            redis.sentinel_password =
                Some(password_file(&near(v)).map_err(|e| at("redis_sentinel_password_file", e))?);
        }
        if let Some(v) = f.http_addr {
            self.http_addr = addr(&v).map_err(|e| at("http_addr", e))?;
        }
        if let Some(v) = f.grpc_addr {
            self.grpc_addr = addr(&v).map_err(|e| at("grpc_addr", e))?;
        }
        self.apply_serving_file(
            serving::ServingFile {
                admin_addr: f.admin_addr,
                admin_token_file: f.admin_token_file,
                tls_cert: f.tls_cert,
                tls_key: f.tls_key,
                tls_client_ca: f.tls_client_ca,
                tls_client_san: f.tls_client_san,
                tls_listeners: f.tls_listeners,
            },
            near,
            at,
        )?;
        self.apply_xds_file(
            xds::XdsFile {
                xds_server: f.xds_server,
                xds_node_id: f.xds_node_id,
                xds_tls_ca: f.xds_tls_ca,
                xds_tls_cert: f.xds_tls_cert,
                xds_tls_key: f.xds_tls_key,
                xds_tls_san: f.xds_tls_san,
            },
            near,
        )?;
        if let Some(v) = f.store_timeout {
            self.store_timeout = duration(&v).map_err(|e| at("store_timeout", e))?;
        }
        if let Some(v) = f.on_store_error {
            self.on_store_error = v
                .parse::<OnStoreError>()
                .map_err(|e| at("on_store_error", e))?;
        }
        self.shadow_mode = f.shadow_mode.unwrap_or(self.shadow_mode);
        self.quota_mode = f.quota_mode.unwrap_or(self.quota_mode);
        if let Some(v) = f.near_limit_ratio {
            self.near_limit_ratio = ratio(v).map_err(|e| at("near_limit_ratio", e))?;
        }
        if let Some(v) = f.headers {
            self.headers = v.parse::<HeaderStyle>().map_err(|e| at("headers", e))?;
        }
        if let Some(on) = f.reference_headers {
            self.reference_headers = on.then(default_reference_headers);
        }
        self.log_level = f.log_level.unwrap_or_else(|| self.log_level.clone());
        if let Some(v) = f.log_format {
            self.log_json = log_format(&v).map_err(|e| at("log_format", e))?;
        }
        self.watch = f.watch.unwrap_or(self.watch);
        self.breaker_failures = f.breaker_failures.unwrap_or(self.breaker_failures);
        if let Some(v) = f.breaker_cooldown {
            self.breaker_cooldown = duration(&v).map_err(|e| at("breaker_cooldown", e))?;
        }
        self.deny_cache_bytes = f.deny_cache_bytes.unwrap_or(self.deny_cache_bytes);
        if let Some(v) = f.header_read_timeout {
            self.header_read_timeout = duration(&v).map_err(|e| at("header_read_timeout", e))?;
        }
        if let Some(v) = f.drain_timeout {
            self.drain_timeout = duration(&v).map_err(|e| at("drain_timeout", e))?;
        }
        self.ui = f.ui.unwrap_or(self.ui);
        if let Some(v) = f.key_prefix {
            self.key_prefix = v;
        }
        self.merge_domains = f.merge_domains.unwrap_or(self.merge_domains);
        self.stop_increment_when_over_limit = f
            .stop_increment_when_over_limit
            .unwrap_or(self.stop_increment_when_over_limit);
        self.dynamic_metadata = f.dynamic_metadata.unwrap_or(self.dynamic_metadata);
        self.reference_local_cache = f
            .reference_local_cache
            .unwrap_or(self.reference_local_cache);
        Ok(())
    }

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A variable lookup over `pairs`, as the settings read the environment (the
    /// tests of every part of the settings use it).
    pub(crate) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_reference_environment_configures_the_service() {
        let mut s = Settings::default();
        s.apply_reference_env(env(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis.internal:6379"),
            ("REDIS_AUTH", "secret"),
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("PORT", "9080"),
            ("GRPC_PORT", "9081"),
            ("LOG_LEVEL", "DEBUG"),
            ("SHADOW_MODE", "true"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_RESET_HEADER", "X-Reset"),
            ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ]))
        .unwrap();
        assert_eq!(s.store, "redis://redis.internal:6379");
        assert_eq!(s.redis.password.as_ref().unwrap().expose(), "secret");
        assert!(!format!("{s:?}").contains("secret"), "no password in Debug");
        assert_eq!(s.config, Path::new("/data/ratelimit/config"));
        assert_eq!(s.http_addr, "0.0.0.0:9080".parse().unwrap());
        assert_eq!(s.grpc_addr, "0.0.0.0:9081".parse().unwrap());
        assert_eq!(s.log_level, "debug");
        assert!(s.shadow_mode);
        assert_eq!(s.reference_headers.as_ref().unwrap()[2], "X-Reset");
        assert_eq!(s.deny_cache_bytes, 1 << 20);
        assert!(s.reference_local_cache);
        assert!(!s.stop_increment_when_over_limit && !s.dynamic_metadata);
        s.apply_reference_env(env(&[
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
            ("RESPONSE_DYNAMIC_METADATA", "1"),
        ]))
        .unwrap();
        assert!(s.stop_increment_when_over_limit && s.dynamic_metadata);
        // The reference's 0 (its default: no cache) turns Spillway's off too.
        let mut s = Settings::default();
        s.apply_reference_env(env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "0")]))
            .unwrap();
        assert_eq!(s.deny_cache_bytes, 0);
        assert!(!s.reference_local_cache);
        assert!(
            s.apply_reference_env(env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "lots")]))
                .is_err()
        );
    }

    #[test]
    fn the_reference_variables_not_honoured_are_named() {
        let set = [
            ("REDIS_POOL_SIZE", "10"),
            ("STATSD_HOST", "localhost"),
            ("REDIS_URL", "r:6379"),
            ("PORT", "8080"),
            ("MEMCACHE_HOST_PORT", "m:11211"),
            ("PATH", "/bin"),
            ("PROTO", "TCP"),
            ("RUNTIME_IGNOREDOTFILES", "false"),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
            ("RESPONSE_DYNAMIC_METADATA", "true"),
        ]
        .map(|(n, v)| (n.to_string(), v.to_string()));
        let names: Vec<String> = not_honoured(set).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "MEMCACHE_HOST_PORT",
                "REDIS_POOL_SIZE",
                "RUNTIME_IGNOREDOTFILES",
                "STATSD_HOST"
            ]
        );
        let mut s = Settings::default();
        s.apply_reference_env(env(&[("CACHE_KEY_PREFIX", "east_")]))
            .unwrap();
        assert_eq!(s.key_prefix, "east_");
    }

    #[test]
    fn a_settings_file_sets_what_it_names_and_refuses_unknown_keys() {
        let dir = std::env::temp_dir().join(format!("spillway-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("spillway.yaml");
        std::fs::write(
            &file,
            "config: policies\nstore: redis://r:6379\nhttp_addr: :9000\nstore_timeout: 25ms\non_store_error: local\nheaders: legacy\nlog_format: json\n",
        )
        .unwrap();
        let mut s = Settings::default();
        s.apply_file(&file).unwrap();
        assert_eq!(
            s.config,
            dir.join("policies"),
            "relative to the settings file"
        );
        assert_eq!(s.store, "redis://r:6379");
        assert_eq!(s.http_addr, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(s.store_timeout, Duration::from_millis(25));
        assert_eq!(s.on_store_error, OnStoreError::Local);
        assert_eq!(s.headers, HeaderStyle::Legacy);
        assert!(s.log_json);

        std::fs::write(&file, "store_timeout: soon\n").unwrap();
        let e = Settings::default()
            .apply_file(&file)
            .unwrap_err()
            .to_string();
        assert!(e.contains("store_timeout: `soon` is not a duration"), "{e}");
        std::fs::write(&file, "stroe: memory\n").unwrap();
        let e = Settings::default()
            .apply_file(&file)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `stroe`"), "{e}");
    }

    #[test]
    fn redis_types_become_urls() {
        let url = |pairs: &[(&str, &str)]| {
            let mut s = Settings::default();
            s.apply_reference_env(env(pairs)).map(|()| s.store)
        };
        assert_eq!(
            url(&[("REDIS_URL", "/var/run/redis.sock")]).unwrap(),
            "unix:///var/run/redis.sock"
        );
        assert_eq!(
            url(&[
                ("REDIS_TYPE", "CLUSTER"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "a:1,b:2")
            ])
            .unwrap(),
            "redis+cluster://a:1,b:2"
        );
        assert_eq!(
            url(&[
                ("REDIS_TYPE", "sentinel"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "mymaster,s1:26379,s2:26379")
            ])
            .unwrap(),
            "redis+sentinel://s1:26379,s2:26379/mymaster"
        );
        assert_eq!(
            url(&[("REDIS_URL", "redis://x:1/2")]).unwrap(),
            "redis://x:1/2"
        );
        assert!(
            url(&[("REDIS_TYPE", "memcache"), ("REDIS_URL", "a:1")])
                .unwrap_err()
                .to_string()
                .contains("REDIS_TYPE")
        );
        assert!(
            url(&[("PORT", "http")])
                .unwrap_err()
                .to_string()
                .starts_with("PORT")
        );
    }
}
