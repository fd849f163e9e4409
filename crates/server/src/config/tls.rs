//! TLS on the service's listeners as configured: the files, which listeners, and the
//! check that they are complete for what is asked, made before anything listens, so a
//! TLS setting that cannot be honoured stops the start instead of serving plaintext.

use std::path::PathBuf;

use super::{Config, ConfigError};

/// The files and checks of the service's TLS (settings).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CAs whose client certificates are accepted: mutual TLS.
    pub client_ca: Option<PathBuf>,
    /// With a client CA: a client certificate must name one of these (a DNS name, IP
    /// address, URI such as a SPIFFE ID, or email address among its SANs).
    pub client_sans: Vec<String>,
}

/// Which listeners speak TLS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsListeners {
    pub grpc: bool,
    pub http: bool,
    pub admin: bool,
}

impl TlsListeners {
    /// `grpc,http,admin` (any of them, or `none`).
    pub fn parse(list: &str) -> Result<TlsListeners, String> {
        let mut on = TlsListeners::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "grpc" => on.grpc = true,
                "http" => on.http = true,
                "admin" => on.admin = true,
                "none" => {}
                other => {
                    return Err(format!(
                        "`{other}` is not a listener (expected grpc, http, admin or none)"
                    ));
                }
            }
        }
        Ok(on)
    }

    pub fn any(self) -> bool {
        self.grpc || self.http || self.admin
    }
}

/// `grpc,http`, or `none`: as [`TlsListeners::parse`] reads it.
impl std::fmt::Display for TlsListeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on: Vec<&str> = [
            (self.grpc, "grpc"),
            (self.http, "http"),
            (self.admin, "admin"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        f.write_str(if on.is_empty() { "none" } else { "" })?;
        f.write_str(&on.join(","))
    }
}

impl Config {
    /// Which listeners speak TLS: as set, or with a certificate and no choice made,
    /// gRPC and HTTP.
    pub fn tls_on(&self) -> TlsListeners {
        self.tls.listeners.unwrap_or(TlsListeners {
            grpc: self.tls.cert.is_some(),
            http: self.tls.cert.is_some(),
            admin: false,
        })
    }

    /// The TLS files, checked to be complete for what is asked: `None` when no listener
    /// speaks TLS. A listener asked for TLS without a certificate and key, a key without
    /// its certificate, or SANs without a client CA, is an error.
    pub fn tls_files(&self) -> Result<Option<TlsFiles>, ConfigError> {
        let on = self.tls_on();
        let err = |m: &str| Err(ConfigError(m.to_owned()));
        let files = match (&self.tls.cert, &self.tls.key) {
            (Some(cert), Some(key)) => TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls.client_ca.clone(),
                client_sans: self.tls.client_sans.clone(),
            },
            (None, None) if !on.any() => {
                if self.tls.client_ca.is_some() {
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
