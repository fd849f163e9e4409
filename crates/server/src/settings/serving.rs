//! How the service is reached: TLS on its listeners (certificate, key, client CA and
//! allowed SANs, and which listeners), and the admin listener (address and token).
//! From the settings file, the reference's `GRPC_*TLS*` and `DEBUG_*` variables, and
//! the command line; checked together before anything listens, so a TLS setting that
//! cannot be honoured stops the start instead of serving plaintext.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::value::{addr, boolean};
use super::{Settings, SettingsError, password_file};
use crate::tls::{TlsFiles, TlsListeners};

/// The default admin listener: loopback only, the reference's debug port.
pub const DEFAULT_ADMIN_ADDR: ([u8; 4], u16) = ([127, 0, 0, 1], 6070);

/// `off` (or `none`) turns the admin listener off; anything else is an address.
pub fn admin_addr(v: &str) -> Result<Option<SocketAddr>, String> {
    match v.trim() {
        "off" | "none" | "" => Ok(None),
        other => addr(other).map(Some),
    }
}

/// The settings file's keys for this part (flat beside the others).
#[derive(Debug, Default)]
pub(super) struct ServingFile {
    pub admin_addr: Option<String>,
    pub admin_token_file: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    pub tls_client_san: Option<Vec<String>>,
    pub tls_listeners: Option<Vec<String>>,
}

impl Settings {
    /// Applies the settings file's serving keys; `near` makes a path relative to the
    /// file.
    pub(super) fn apply_serving_file(
        &mut self,
        f: ServingFile,
        near: impl Fn(PathBuf) -> PathBuf,
        at: impl Fn(&str, String) -> SettingsError,
    ) -> Result<(), SettingsError> {
        if let Some(v) = f.admin_addr {
            self.admin_addr = admin_addr(&v).map_err(|e| at("admin_addr", e))?;
        }
        if let Some(v) = f.admin_token_file {
            self.admin_token =
                Some(password_file(&near(v)).map_err(|e| at("admin_token_file", e))?);
        }
        if let Some(v) = f.tls_cert {
            self.tls_cert = Some(near(v));
        }
        if let Some(v) = f.tls_key {
            self.tls_key = Some(near(v));
        }
        if let Some(v) = f.tls_client_ca {
            self.tls_client_ca = Some(near(v));
        }
        if let Some(v) = f.tls_client_san {
            self.tls_client_sans = v;
        }
        if let Some(v) = f.tls_listeners {
            self.tls_listeners =
                Some(TlsListeners::parse(&v.join(",")).map_err(|e| at("tls_listeners", e))?);
        }
        Ok(())
    }

    /// The reference's variables for TLS on gRPC (`GRPC_SERVER_USE_TLS`,
    /// `GRPC_SERVER_TLS_CERT`/`_KEY`, `GRPC_CLIENT_TLS_CACERT`, `GRPC_CLIENT_TLS_SAN`)
    /// and its debug port (`DEBUG_HOST`, `DEBUG_PORT`). As the reference, they put TLS
    /// on the gRPC port only: the HTTP port keeps serving Kubernetes' plain probes.
    /// `GRPC_SERVER_TLS_CA_CERT` (Envoy Gateway sets it) is read as the reference
    /// reads it: not at all.
    pub(super) fn apply_serving_env(
        &mut self,
        var: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), SettingsError> {
        let env_err = |name: &str, e: String| SettingsError(format!("{name}: {e}"));
        if let Some(v) = var("GRPC_SERVER_USE_TLS") {
            let on = boolean(&v).map_err(|e| env_err("GRPC_SERVER_USE_TLS", e))?;
            let mut listeners = self.tls_listeners.unwrap_or_default();
            listeners.grpc = on;
            self.tls_listeners = Some(listeners);
        }
        if let Some(v) = var("GRPC_SERVER_TLS_CERT").filter(|v| !v.is_empty()) {
            self.tls_cert = Some(v.into());
        }
        if let Some(v) = var("GRPC_SERVER_TLS_KEY").filter(|v| !v.is_empty()) {
            self.tls_key = Some(v.into());
        }
        if let Some(v) = var("GRPC_CLIENT_TLS_CACERT").filter(|v| !v.is_empty()) {
            self.tls_client_ca = Some(v.into());
        }
        if let Some(v) = var("GRPC_CLIENT_TLS_SAN").filter(|v| !v.is_empty()) {
            self.tls_client_sans = vec![v];
        }
        // Only the port set: the host stays loopback (an operator reaches it through
        // `kubectl port-forward`, which arrives on loopback).
        if var("DEBUG_HOST").is_some() || var("DEBUG_PORT").is_some() {
            let current = self
                .admin_addr
                .unwrap_or_else(|| SocketAddr::from(DEFAULT_ADMIN_ADDR));
            let host = var("DEBUG_HOST").unwrap_or_else(|| current.ip().to_string());
            let port = match var("DEBUG_PORT") {
                Some(p) => p
                    .parse::<u16>()
                    .map_err(|e| env_err("DEBUG_PORT", e.to_string()))?,
                None => current.port(),
            };
            self.admin_addr =
                Some(addr(&format!("{host}:{port}")).map_err(|e| env_err("DEBUG_HOST", e))?);
        }
        Ok(())
    }

    /// Which listeners speak TLS: as set, or with a certificate and no choice made,
    /// gRPC and HTTP.
    pub fn tls_on(&self) -> TlsListeners {
        self.tls_listeners.unwrap_or(TlsListeners {
            grpc: self.tls_cert.is_some(),
            http: self.tls_cert.is_some(),
            admin: false,
        })
    }

    /// The TLS files, checked to be complete for what is asked: `None` when no listener
    /// speaks TLS. A listener asked for TLS without a certificate and key, a key without
    /// its certificate, or SANs without a client CA, is an error.
    pub fn tls_files(&self) -> Result<Option<TlsFiles>, SettingsError> {
        let on = self.tls_on();
        let err = |m: &str| Err(SettingsError(m.to_owned()));
        let files = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
                client_sans: self.tls_client_sans.clone(),
            },
            (None, None) if !on.any() => {
                if self.tls_client_ca.is_some() {
                    return err(
                        "a client CA (tls_client_ca, GRPC_CLIENT_TLS_CACERT) needs TLS: give \
                         tls_cert and tls_key (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)",
                    );
                }
                return Ok(None);
            }
            (None, None) => {
                return err(
                    "TLS is asked for (tls_listeners, GRPC_SERVER_USE_TLS) but no certificate \
                     is given: set tls_cert and tls_key (GRPC_SERVER_TLS_CERT, \
                     GRPC_SERVER_TLS_KEY); refusing to serve plaintext",
                );
            }
            (Some(_), None) => return err("tls_cert needs tls_key (GRPC_SERVER_TLS_KEY) too"),
            (None, Some(_)) => return err("tls_key needs tls_cert (GRPC_SERVER_TLS_CERT) too"),
        };
        if !files.client_sans.is_empty() && files.client_ca.is_none() {
            return err(
                "allowed client SANs (tls_client_san, GRPC_CLIENT_TLS_SAN) need a client CA \
                 (tls_client_ca, GRPC_CLIENT_TLS_CACERT)",
            );
        }
        if !on.any() {
            return err(
                "a TLS certificate is given but tls_listeners is none: say which listeners \
                 serve it (grpc, http, admin)",
            );
        }
        Ok(Some(files))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::env;

    #[test]
    fn the_reference_variables_put_tls_on_grpc_only() {
        let mut s = Settings::default();
        s.apply_serving_env(&env(&[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
            ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
            ("GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt"),
            ("GRPC_CLIENT_TLS_SAN", "envoy"),
            ("DEBUG_PORT", "7070"),
        ]))
        .unwrap();
        let on = s.tls_on();
        assert!(on.grpc && !on.http && !on.admin, "{on:?}");
        let files = s.tls_files().unwrap().unwrap();
        assert_eq!(files.client_ca.unwrap(), PathBuf::from("/certs/ca.crt"));
        assert_eq!(files.client_sans, ["envoy"]);
        assert_eq!(s.admin_addr, Some("127.0.0.1:7070".parse().unwrap()));
    }

    #[test]
    fn tls_that_cannot_be_honoured_is_an_error_not_plaintext() {
        let mut s = Settings::default();
        s.apply_serving_env(&env(&[("GRPC_SERVER_USE_TLS", "true")]))
            .unwrap();
        let e = s.tls_files().unwrap_err().to_string();
        assert!(e.contains("refusing to serve plaintext"), "{e}");

        let mut s = Settings {
            tls_cert: Some("a.crt".into()),
            ..Settings::default()
        };
        assert!(s.tls_files().unwrap_err().to_string().contains("tls_key"));
        s.tls_key = Some("a.key".into());
        s.tls_client_sans = vec!["x".into()];
        assert!(s.tls_files().unwrap_err().to_string().contains("client CA"));
        s.tls_client_sans.clear();
        let on = s.tls_on();
        assert!(
            on.grpc && on.http && !on.admin,
            "a certificate alone: both check ports"
        );
        s.tls_listeners = Some(TlsListeners::default());
        assert!(s.tls_files().unwrap_err().to_string().contains("none"));

        assert!(TlsListeners::parse("grpc,smtp").is_err());
        assert_eq!(admin_addr("off").unwrap(), None);
        assert!(
            Settings::default()
                .apply_serving_env(&env(&[("DEBUG_PORT", "x")]))
                .is_err()
        );
    }
}
