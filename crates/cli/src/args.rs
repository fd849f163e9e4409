//! What the subcommands' arguments share: value parsers (numbers with clear errors,
//! any type that parses from its name), the settings' flags (made from the settings
//! table), and TLS to a server.

use std::path::PathBuf;

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

mod settings;
pub use settings::{All, Redis, SettingFlags};

/// The Redis TLS and credential flags of `check` and `bench`.
pub type RedisAccess = SettingFlags<Redis>;

/// One line on stderr when a store is reached with TLS that verifies nothing.
pub fn warn_if_insecure(access: &spillway_redis::Access) {
    if access.tls.verify == spillway_redis::Verify::Insecure {
        eprintln!(
            "warning: --redis-tls-verify none: Redis's certificate is not checked, so anyone \
             on the path can pose as Redis"
        );
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

/// How a command that reads the admin listener (`explain`) presents its token, when
/// the service has `admin_token_file`.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "The admin listener's token")]
pub struct AdminToken {
    /// A file whose first line is the admin token (as the service's admin_token_file),
    /// sent as `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,

    /// The admin token itself, from the environment only (never on the command line,
    /// where `ps` would show it).
    #[arg(long = "token-from-env", env = "SPILLWAY_ADMIN_TOKEN", hide = true)]
    pub token: Option<String>,
}

impl AdminToken {
    /// The token to send, if one was given.
    pub fn read(&self) -> anyhow::Result<Option<spillway_redis::Password>> {
        if let Some(path) = &self.token_file {
            let token = spillway_redis::Password::from_file(path).map_err(|e| match e {
                spillway_redis::Error::InvalidSetting(why) => {
                    anyhow::anyhow!("--token-file: {why}")
                }
                other => anyhow::anyhow!("--token-file: {other}"),
            })?;
            return Ok(Some(token));
        }
        Ok(self
            .token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(spillway_redis::Password::new))
    }
}
