//! What the subcommands' arguments share: value parsers (numbers with clear errors,
//! any type that parses from its name) and the Redis TLS and credential flags.

use std::path::PathBuf;
use std::str::FromStr;

pub fn positive(s: &str) -> Result<u64, String> {
    match s.parse::<i128>() {
        Ok(n) if n >= 1 && n <= i128::from(u64::MAX) => Ok(n as u64),
        Ok(n) => Err(format!("must be a positive whole number, got {n}")),
        Err(_) => Err(format!("must be a positive whole number, got `{s}`")),
    }
}

pub fn cost(s: &str) -> Result<u64, String> {
    match s.parse::<i128>() {
        Ok(n) if n >= 0 && n <= i128::from(spillway_core::MAX_EXACT) => Ok(n as u64),
        Ok(n) => Err(format!("must be a whole number from 0 to 2^53, got {n}")),
        Err(_) => Err(format!("must be a whole number from 0 to 2^53, got `{s}`")),
    }
}

pub fn positive_u32(s: &str) -> Result<u32, String> {
    let n = positive(s)?;
    u32::try_from(n).map_err(|_| format!("must be at most {}, got {n}", u32::MAX))
}

/// Any type named by a string: its own `FromStr` says what is wrong.
pub fn named<T: FromStr<Err = String>>(s: &str) -> Result<T, String> {
    s.parse()
}

/// How to reach a Redis store beside its URL: TLS files and credentials. Shared by
/// `serve`, `check` and `bench`; flags win over the settings file and the reference's
/// variables.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Redis TLS and credentials")]
pub struct RedisAccess {
    /// PEM file of the CAs to trust for a rediss:// store (default: the system's roots,
    /// or SSL_CERT_FILE).
    #[arg(long, env = "SPILLWAY_REDIS_TLS_CA", value_name = "FILE")]
    pub redis_tls_ca: Option<PathBuf>,

    /// PEM client certificate to present to Redis (mutual TLS; with --redis-tls-key).
    #[arg(long, env = "SPILLWAY_REDIS_TLS_CERT", value_name = "FILE")]
    pub redis_tls_cert: Option<PathBuf>,

    /// PEM private key of --redis-tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "SPILLWAY_REDIS_TLS_KEY", value_name = "FILE")]
    pub redis_tls_key: Option<PathBuf>,

    /// How much of Redis's certificate to verify: full (chain and name), chain (not
    /// the name), none (nothing: tests only; warned).
    #[arg(long, env = "SPILLWAY_REDIS_TLS_VERIFY", value_name = "full|chain|none",
          value_parser = spillway_server::settings::verify)]
    pub redis_tls_verify: Option<spillway_redis::Verify>,

    /// The Redis ACL user (over the URL's).
    #[arg(long, env = "SPILLWAY_REDIS_USERNAME", value_name = "USER")]
    pub redis_username: Option<String>,

    /// A file whose first line is the Redis password (over the URL's): in neither argv
    /// nor the environment.
    #[arg(long, env = "SPILLWAY_REDIS_PASSWORD_FILE", value_name = "FILE")]
    pub redis_password_file: Option<PathBuf>,

    /// The sentinels' ACL user (redis+sentinel:// stores).
    #[arg(long, env = "SPILLWAY_REDIS_SENTINEL_USERNAME", value_name = "USER")]
    pub redis_sentinel_username: Option<String>,

    /// A file whose first line is the sentinels' password.
    #[arg(
        long,
        env = "SPILLWAY_REDIS_SENTINEL_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub redis_sentinel_password_file: Option<PathBuf>,
}

impl RedisAccess {
    /// These flags over `access`. A password file that cannot be read is an error
    /// naming the flag and the file.
    pub fn apply(&self, access: &mut spillway_redis::Access) -> anyhow::Result<()> {
        use anyhow::Context;
        use spillway_redis::Password;
        let tls = &mut access.tls;
        tls.ca_file = self.redis_tls_ca.clone().or(tls.ca_file.take());
        tls.client_cert = self.redis_tls_cert.clone().or(tls.client_cert.take());
        tls.client_key = self.redis_tls_key.clone().or(tls.client_key.take());
        tls.verify = self.redis_tls_verify.unwrap_or(tls.verify);
        if let Some(u) = &self.redis_username {
            access.username = Some(u.clone());
        }
        if let Some(f) = &self.redis_password_file {
            access.password = Some(Password::from_file(f).context("--redis-password-file")?);
        }
        if let Some(u) = &self.redis_sentinel_username {
            access.sentinel_username = Some(u.clone());
        }
        if let Some(f) = &self.redis_sentinel_password_file {
            access.sentinel_password =
                Some(Password::from_file(f).context("--redis-sentinel-password-file")?);
        }
        Ok(())
    }

    /// The access these flags describe, alone (`check`, `bench`).
    pub fn access(&self) -> anyhow::Result<spillway_redis::Access> {
        let mut access = spillway_redis::Access::default();
        self.apply(&mut access)?;
        Ok(access)
    }
}

/// One line on stderr when a store is reached with TLS that verifies nothing.
pub fn warn_if_insecure(access: &spillway_redis::Access) {
    if access.tls.verify == spillway_redis::Verify::Insecure {
        eprintln!(
            "warning: --redis-tls-verify none: Redis's certificate is not checked, so anyone \
             on the path can pose as Redis"
        );
    }
}

/// `serve`'s TLS: the certificate it serves, mutual TLS, and on which listeners.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Serving TLS")]
pub struct ServeTls {
    /// PEM certificate chain to serve (leaf first); reloaded when the file changes and
    /// on SIGHUP. With it, gRPC and HTTP speak TLS unless --tls-listeners says otherwise.
    #[arg(long, env = "SPILLWAY_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "SPILLWAY_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// PEM CAs whose client certificates are required (mutual TLS; reloaded too).
    /// Health probes on the HTTP listeners need none.
    #[arg(long, env = "SPILLWAY_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,

    /// A client certificate must name one of these among its SANs (DNS name, IP,
    /// URI such as a SPIFFE ID, or email); repeat for more.
    #[arg(
        long = "tls-client-san",
        env = "SPILLWAY_TLS_CLIENT_SAN",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub tls_client_sans: Vec<String>,

    /// Which listeners speak TLS: grpc, http, admin (comma-separated), or none.
    #[arg(long, env = "SPILLWAY_TLS_LISTENERS", value_name = "LIST",
          value_parser = spillway_server::tls::TlsListeners::parse)]
    pub tls_listeners: Option<spillway_server::tls::TlsListeners>,
}

impl ServeTls {
    /// These flags over the settings.
    pub fn apply(&self, s: &mut spillway_server::Settings) {
        s.tls_cert = self.tls_cert.clone().or(s.tls_cert.take());
        s.tls_key = self.tls_key.clone().or(s.tls_key.take());
        s.tls_client_ca = self.tls_client_ca.clone().or(s.tls_client_ca.take());
        if !self.tls_client_sans.is_empty() {
            s.tls_client_sans = self.tls_client_sans.clone();
        }
        s.tls_listeners = self.tls_listeners.or(s.tls_listeners);
    }
}

/// How `check` and `bench` reach a server over TLS (`grpcs://`, `https://`).
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "TLS to the server")]
pub struct ClientTls {
    /// PEM CAs to trust for a grpcs:// or https:// server (default: the system's roots).
    #[arg(long, env = "SPILLWAY_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,

    /// PEM client certificate to present (mutual TLS; with --client-key).
    #[arg(long, env = "SPILLWAY_CLIENT_CERT", value_name = "FILE")]
    pub client_cert: Option<PathBuf>,

    /// PEM private key of --client-cert.
    #[arg(long, env = "SPILLWAY_CLIENT_KEY", value_name = "FILE")]
    pub client_key: Option<PathBuf>,
}

/// `serve`'s rules over xDS (instead of `--config`'s files).
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Rules over xDS")]
pub struct Xds {
    /// Take the live rules from this ADS server (host:port) instead of policy files:
    /// RateLimitConfig resources, as the reference's CONFIG_TYPE=GRPC_XDS_SOTW.
    #[arg(long, env = "SPILLWAY_XDS_SERVER", value_name = "HOST:PORT")]
    pub xds_server: Option<String>,

    /// The node id the server knows this service by (default `default`).
    #[arg(long, env = "SPILLWAY_XDS_NODE_ID", value_name = "ID")]
    pub xds_node_id: Option<String>,

    /// PEM CAs to trust for the ADS server: TLS to it (default: plaintext).
    #[arg(long, env = "SPILLWAY_XDS_TLS_CA", value_name = "FILE")]
    pub xds_tls_ca: Option<PathBuf>,

    /// PEM client certificate to present to the ADS server (with --xds-tls-key).
    #[arg(long, env = "SPILLWAY_XDS_TLS_CERT", value_name = "FILE")]
    pub xds_tls_cert: Option<PathBuf>,

    /// PEM private key of --xds-tls-cert.
    #[arg(long, env = "SPILLWAY_XDS_TLS_KEY", value_name = "FILE")]
    pub xds_tls_key: Option<PathBuf>,

    /// The name the ADS server's certificate must carry (default: the server's host).
    #[arg(long, env = "SPILLWAY_XDS_TLS_SAN", value_name = "NAME")]
    pub xds_tls_san: Option<String>,

    /// The node's metadata, `key=value,key=value`.
    #[arg(long, env = "SPILLWAY_XDS_NODE_METADATA", value_name = "K=V,...")]
    pub xds_node_metadata: Option<String>,

    /// gRPC metadata sent with the stream, `key:value,key:value`.
    #[arg(long, env = "SPILLWAY_XDS_HEADERS", value_name = "K:V,...")]
    pub xds_headers: Option<String>,

    /// The reconnect backoff's first wait (default 1s); it doubles up to --xds-backoff-max.
    #[arg(long, env = "SPILLWAY_XDS_BACKOFF_INITIAL", value_parser = spillway_policy::duration::parse)]
    pub xds_backoff_initial: Option<std::time::Duration>,

    /// The reconnect backoff's longest wait (default 60s).
    #[arg(long, env = "SPILLWAY_XDS_BACKOFF_MAX", value_parser = spillway_policy::duration::parse)]
    pub xds_backoff_max: Option<std::time::Duration>,

    /// The largest xDS response accepted, in bytes (default 4 MiB).
    #[arg(long, env = "SPILLWAY_XDS_MAX_MESSAGE_BYTES")]
    pub xds_max_message_bytes: Option<usize>,

    /// Ready before the first rules arrive, deciding with none until they do (the
    /// reference's FORCE_START_WITHOUT_INITIAL_CONFIG).
    #[arg(long, env = "SPILLWAY_XDS_READY_WITHOUT_RULES")]
    pub xds_ready_without_rules: bool,
}

impl Xds {
    /// These flags over the settings.
    pub fn apply(&self, s: &mut spillway_server::Settings) -> anyhow::Result<()> {
        use spillway_server::settings::pairs;
        if let Some(v) = &self.xds_node_metadata {
            s.xds_mut().node_metadata = pairs(v, '=', "--xds-node-metadata")?;
        }
        if let Some(v) = &self.xds_headers {
            s.xds_mut().headers = pairs(v, ':', "--xds-headers")?;
        }
        if let Some(v) = self.xds_backoff_initial {
            s.xds_mut().backoff_initial = v;
        }
        if let Some(v) = self.xds_backoff_max {
            s.xds_mut().backoff_max = v;
        }
        if let Some(v) = self.xds_max_message_bytes {
            s.xds_mut().max_message_bytes = v;
        }
        if let Some(v) = &self.xds_server {
            s.xds_mut().server = v.clone();
        }
        if let Some(v) = &self.xds_node_id {
            s.xds_mut().node_id = v.clone();
        }
        let any_tls = self.xds_tls_ca.is_some()
            || self.xds_tls_cert.is_some()
            || self.xds_tls_key.is_some()
            || self.xds_tls_san.is_some();
        if any_tls {
            let tls = s.xds_mut().tls.get_or_insert_with(Default::default);
            tls.server_ca = self.xds_tls_ca.clone().or(tls.server_ca.take());
            tls.client_cert = self.xds_tls_cert.clone().or(tls.client_cert.take());
            tls.client_key = self.xds_tls_key.clone().or(tls.client_key.take());
            tls.server_san = self.xds_tls_san.clone().or(tls.server_san.take());
        }
        s.force_start_without_rules |= self.xds_ready_without_rules;
        Ok(())
    }
}
