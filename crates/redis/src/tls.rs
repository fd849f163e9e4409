//! TLS to Redis: which CAs to trust, which certificate to present, and how much of
//! the server's certificate to verify. The files are read and checked once, when the
//! store is built, so a missing, malformed or mismatched file is an error that names
//! it at startup rather than a failed handshake later.
//!
//! **The crypto provider.** rustls needs one per process, and panics on the first TLS
//! connection when none was chosen and it cannot pick one itself. A library must not
//! leave that to luck, so [`ensure_provider`] runs before any TLS store connects: if
//! the application installed a provider (`CryptoProvider::install_default`, before
//! building the store), that one is used; otherwise this crate installs *ring*'s, once.

use std::path::{Path, PathBuf};

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::RootCertStore;

use crate::Error;
use crate::pem::{self, tls};

/// How a TLS store (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`) checks
/// the server and proves who it is. The default trusts the system's roots (and
/// `SSL_CERT_FILE`), presents no certificate, and verifies the chain and the name.
///
/// ```
/// use spillway_redis::{TlsOptions, Verify};
///
/// let mut tls = TlsOptions::default();
/// tls.ca_file = Some("/etc/redis-tls/ca.crt".into());
/// tls.client_cert = Some("/etc/redis-tls/tls.crt".into());
/// tls.client_key = Some("/etc/redis-tls/tls.key".into());
/// tls.verify = Verify::ChainOnly; // the server's certificate does not name its address
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsOptions {
    /// PEM file of the CAs to trust, instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate (chain) to present to Redis (mutual TLS); needs `client_key`.
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`: PKCS#8, PKCS#1 (`RSA PRIVATE KEY`) or SEC1.
    pub client_key: Option<PathBuf>,
    /// How much of the server's certificate to check.
    pub verify: Verify,
}

/// How much of the server's certificate a TLS store checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verify {
    /// The chain up to a trusted CA, the validity dates, and that it names the host
    /// connected to.
    #[default]
    Full,
    /// The chain and dates, not the name: for servers reached by an address their
    /// certificate does not name (a Cluster announcing IPs, a tunnel). The reference
    /// service's `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`.
    ChainOnly,
    /// Nothing: anyone on the path can pose as Redis. For tests; `serve` warns when
    /// it starts with this.
    Insecure,
}

impl TlsOptions {
    /// Whether anything differs from the default.
    pub fn is_set(&self) -> bool {
        *self != TlsOptions::default()
    }

    /// Reads and checks the files: the certificates redis-rs is handed. `None` when
    /// there is nothing to hand it (system roots, no client certificate).
    pub(crate) fn load(&self) -> Result<Option<TlsCertificates>, Error> {
        let root_cert = self.ca_file.as_deref().map(read_ca).transpose()?;
        let client_tls = match (&self.client_cert, &self.client_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(read_client(cert, key)?),
            (Some(_), None) => return Err(tls("a client certificate needs its key too")),
            (None, Some(_)) => return Err(tls("a client key needs its certificate too")),
        };
        if self.verify == Verify::Insecure && root_cert.is_some() {
            return Err(tls(
                "a CA file and insecure mode exclude each other: insecure mode verifies nothing",
            ));
        }
        Ok(
            (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
                client_tls,
                root_cert,
            }),
        )
    }
}

/// Installs *ring* as the process's crypto provider unless one is installed already.
pub(crate) fn ensure_provider() {
    crate::pem::provider();
}

/// The CA file, checked: at least one certificate, each one a usable trust anchor.
fn read_ca(path: &Path) -> Result<Vec<u8>, Error> {
    let pem = pem::read(path, "CA file")?;
    pem::roots_in(&pem, path, "CA file")?;
    Ok(pem)
}

/// The client certificate and key, checked to be a pair.
fn read_client(cert_path: &Path, key_path: &Path) -> Result<ClientTlsConfig, Error> {
    let client_cert = pem::read(cert_path, "client certificate")?;
    let client_key = pem::read(key_path, "client key")?;
    let chain = pem::certificates_in(&client_cert, cert_path, "client certificate")?;
    let key = pem::private_key_in(&client_key, key_path, "client key")?;
    rustls::ClientConfig::builder_with_provider(pem::provider())
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_root_certificates(RootCertStore::empty())
                .with_client_auth_cert(chain, key)
        })
        .map_err(|e| {
            tls(format!(
                "client certificate `{}` and key `{}` cannot be used together: {e}",
                cert_path.display(),
                key_path.display()
            ))
        })?;
    Ok(ClientTlsConfig {
        client_cert,
        client_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("spillway-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn defaults_hand_redis_rs_nothing() {
        assert!(!TlsOptions::default().is_set());
        assert!(TlsOptions::default().load().unwrap().is_none());
    }

    #[test]
    fn bad_files_are_named_with_what_is_wrong() {
        let dir = scratch("bad");
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let err = |tls: TlsOptions| tls.load().unwrap_err().to_string();

        let e = err(TlsOptions {
            ca_file: Some(dir.join("missing.crt")),
            ..TlsOptions::default()
        });
        assert!(
            e.contains("cannot read CA file") && e.contains("missing.crt"),
            "{e}"
        );

        let e = err(TlsOptions {
            ca_file: Some(junk.clone()),
            ..TlsOptions::default()
        });
        assert!(e.contains("holds no PEM certificate"), "{e}");

        let e = err(TlsOptions {
            client_cert: Some(junk.clone()),
            ..TlsOptions::default()
        });
        assert!(e.contains("needs its key"), "{e}");

        let e = err(TlsOptions {
            client_cert: Some(junk.clone()),
            client_key: Some(junk.clone()),
            ..TlsOptions::default()
        });
        assert!(
            e.contains("client certificate") && e.contains("no PEM certificate"),
            "{e}"
        );
    }
}
