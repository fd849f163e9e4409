//! PEM files read and checked, each error naming the file and what is wrong with it:
//! for this crate's TLS to Redis, and for the service's own TLS and the CLI's (one
//! reader, so every TLS file in Spillway is refused with the same words).

use std::path::Path;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::Error;

/// Installs *ring* as the process's crypto provider unless one is installed already
/// (by the application, or earlier here), and returns the one in use. Racing installs
/// are fine: one wins, and both are *ring*'s or the application's.
pub fn provider() -> std::sync::Arc<CryptoProvider> {
    if CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::ring::default_provider()))
}

/// The bytes of `path`, `what` naming it in the error.
pub fn read(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| tls(format!("cannot read {what} `{}`: {e}", path.display())))
}

/// Every certificate in the PEM file `path` (at least one).
pub fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    certificates_in(&read(path, what)?, path, what)
}

/// Every certificate in `pem`, read from `path` (at least one).
pub(crate) fn certificates_in(
    pem: &[u8],
    path: &Path,
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls(format!("{what} `{}` is not valid PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(tls(format!(
            "{what} `{}` holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// The private key in the PEM file `path` (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path, what: &str) -> Result<PrivateKeyDer<'static>, Error> {
    private_key_in(&read(path, what)?, path, what)
}

pub(crate) fn private_key_in(
    pem: &[u8],
    path: &Path,
    what: &str,
) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        tls(format!(
            "{what} `{}` holds no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}",
            path.display()
        ))
    })
}

/// The CA certificates in the PEM file `path`, each one checked to be a usable trust
/// anchor.
pub fn roots(path: &Path, what: &str) -> Result<RootCertStore, Error> {
    roots_in(&read(path, what)?, path, what)
}

pub(crate) fn roots_in(pem: &[u8], path: &Path, what: &str) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for (i, cert) in certificates_in(pem, path, what)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            tls(format!(
                "{what} `{}`: certificate {} is not a usable CA: {e}",
                path.display(),
                i + 1
            ))
        })?;
    }
    Ok(roots)
}

/// A TLS client's configuration: trusting the CAs in `ca_file` (or the system's roots,
/// and `SSL_CERT_FILE`), presenting `identity` (a certificate and its key) when given;
/// no ALPN (the caller sets it).
pub fn client_config(
    ca_file: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, Error> {
    let roots = match ca_file {
        Some(path) => roots(path, "CA file")?,
        None => {
            let mut roots = RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(tls(
                    "no CA file given and no system roots found: pass one (--ca-file)",
                ));
            }
            roots
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls)?
        .with_root_certificates(roots);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                certificates(cert, "client certificate")?,
                private_key(key, "client key")?,
            )
            .map_err(|e| {
                tls(format!(
                    "client certificate `{}` and key `{}` cannot be used together: {e}",
                    cert.display(),
                    key.display()
                ))
            }),
    }
}

pub(crate) fn tls(why: impl std::fmt::Display) -> Error {
    Error::Tls(why.to_string())
}
