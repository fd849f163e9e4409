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
use value::{default_reference_headers, ratio};
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
}

#[cfg(test)]
pub(crate) mod tests;
