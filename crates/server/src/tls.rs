//! Serving TLS: a certificate and key from PEM files, ALPN `h2` and `http/1.1`, and with
//! a client CA, mutual TLS (an optional list of SANs a client certificate must name).
//! The files are read whole into a new rustls configuration that is swapped in
//! ([`Certs::reload`]) when they change or on SIGHUP: new handshakes use the new pair,
//! open connections keep theirs, and a reload that fails keeps the old one.
//!
//! Two configurations come from the same files. The gRPC listener requires a client
//! certificate at the handshake; the HTTP and admin listeners ask for one and verify it
//! when it is presented, but let a client without one finish the handshake so that a
//! health probe (a kubelet cannot present a certificate) still gets `/healthz`,
//! `/readyz` and `/healthcheck`; every other path answers 403 to such a client
//! ([`ClientCert`], checked in the routers).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use spillway_redis::pem;

use crate::metrics;

mod san;
use san::SanCheck;
pub use san::subject_alt_names;

pub use crate::config::{TlsFiles, TlsListeners};

/// The configurations in use, swapped whole on a reload.
#[derive(Debug)]
struct Loaded {
    /// Client certificate required at the handshake (when there is a client CA).
    strict: Arc<ServerConfig>,
    /// Client certificate verified when presented (when there is a client CA).
    lenient: Arc<ServerConfig>,
    /// When the certificate expires (Unix seconds).
    not_after: i64,
}

/// The service's certificates, reloadable.
#[derive(Debug)]
pub struct Certs {
    files: TlsFiles,
    current: ArcSwap<Loaded>,
}

impl Certs {
    /// Reads and checks the files; an error names the file and what is wrong.
    pub fn load(files: TlsFiles) -> Result<Arc<Certs>, String> {
        let loaded = build(&files)?;
        // Exported for the pair in use only: a reload that fails must not show its.
        metrics::tls_not_after(loaded.not_after);
        Ok(Arc::new(Certs {
            files,
            current: ArcSwap::from_pointee(loaded),
        }))
    }

    /// Reads the files again; on success new handshakes use them, on failure the old
    /// configuration stays. Logged and counted either way.
    pub fn reload(&self) -> Result<(), String> {
        match build(&self.files) {
            Ok(loaded) => {
                metrics::tls_not_after(loaded.not_after);
                self.current.store(Arc::new(loaded));
                metrics::tls_reload(true);
                tracing::info!(cert = %self.files.cert.display(), "TLS certificates reloaded");
                Ok(())
            }
            Err(e) => {
                metrics::tls_reload(false);
                tracing::error!(error = %e, "TLS certificates not reloaded; the last good ones stay");
                Err(e)
            }
        }
    }

    /// The files watched for changes.
    pub fn paths(&self) -> Vec<PathBuf> {
        let f = &self.files;
        [Some(&f.cert), Some(&f.key), f.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// Whether a client without a certificate is let through the handshake of a
    /// lenient listener (there is a client CA).
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// An acceptor for one handshake with the current configuration.
    pub(crate) fn acceptor(&self, strict: bool) -> tokio_rustls::TlsAcceptor {
        let loaded = self.current.load();
        let config = if strict {
            &loaded.strict
        } else {
            &loaded.lenient
        };
        tokio_rustls::TlsAcceptor::from(Arc::clone(config))
    }
}

/// Whether the client of an HTTP request over mutual TLS presented a certificate, and
/// its subject (a request extension; absent without mutual TLS). The admin API names a
/// change's author by it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCert {
    /// A certificate was presented (and the CA and SAN checks passed).
    pub presented: bool,
    /// Its subject's distinguished name (`CN=ops,O=Acme`), when it has one.
    pub subject: Option<Arc<str>>,
}

impl ClientCert {
    /// Of a connection whose client presented `chain` (its own certificate first).
    pub fn of(chain: Option<&[rustls::pki_types::CertificateDer<'_>]>) -> ClientCert {
        let subject = chain
            .and_then(|c| c.first())
            .and_then(|c| x509_parser::parse_x509_certificate(c).ok())
            .map(|(_, c)| c.subject().to_string())
            .filter(|s| !s.is_empty())
            .map(Arc::from);
        ClientCert {
            presented: chain.is_some(),
            subject,
        }
    }
}

/// Whether `path` is a health probe: answered to a client without a certificate, and
/// on the admin listener without its token (a probe has neither).
pub(crate) fn is_health(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/healthcheck")
}

fn build(files: &TlsFiles) -> Result<Loaded, String> {
    let provider = pem::provider();
    let chain = pem::certificates(&files.cert, "certificate").map_err(|e| e.to_string())?;
    let key = pem::private_key(&files.key, "key").map_err(|e| e.to_string())?;
    let not_after = check_validity(&chain[0], &files.cert)?;
    let config =
        |verifier: Option<Arc<dyn ClientCertVerifier>>| -> Result<Arc<ServerConfig>, String> {
            let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?;
            let builder = match verifier {
                Some(v) => builder.with_client_cert_verifier(v),
                None => builder.with_no_client_auth(),
            };
            let mut config = builder
                .with_single_cert(chain.clone(), key.clone_key())
                .map_err(|e| {
                    format!(
                        "certificate `{}` and key `{}` cannot be used together: {e}",
                        files.cert.display(),
                        files.key.display()
                    )
                })?;
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        };
    let Some(ca) = &files.client_ca else {
        let plain = config(None)?;
        return Ok(Loaded {
            strict: Arc::clone(&plain),
            lenient: plain,
            not_after,
        });
    };
    let roots = Arc::new(pem::roots(ca, "client CA file").map_err(|e| e.to_string())?);
    let verifier = |optional: bool| -> Result<Arc<dyn ClientCertVerifier>, String> {
        let builder =
            WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider));
        let builder = if optional {
            builder.allow_unauthenticated()
        } else {
            builder
        };
        let inner = builder
            .build()
            .map_err(|e| format!("client CA file `{}`: {e}", ca.display()))?;
        Ok(if files.client_sans.is_empty() {
            inner
        } else {
            Arc::new(SanCheck {
                inner,
                allowed: files.client_sans.clone(),
            })
        })
    };
    Ok(Loaded {
        strict: config(Some(verifier(false)?))?,
        lenient: config(Some(verifier(true)?))?,
        not_after,
    })
}

/// A certificate outside its validity is refused: clients would refuse it anyway, and
/// a reload must not swap in a pair that fails every handshake. When it expires (Unix
/// seconds).
fn check_validity(leaf: &CertificateDer<'_>, path: &Path) -> Result<i64, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("certificate `{}` cannot be read: {e}", path.display()))?;
    let validity = cert.validity();
    let now = UnixTime::now().as_secs() as i64;
    if now > validity.not_after.timestamp() {
        return Err(format!(
            "certificate `{}` expired on {}",
            path.display(),
            validity.not_after
        ));
    }
    if now < validity.not_before.timestamp() {
        return Err(format!(
            "certificate `{}` is not valid until {}",
            path.display(),
            validity.not_before
        ));
    }
    Ok(validity.not_after.timestamp())
}

/// Why a handshake failed, as the metric's `reason` label has it (a fixed set).
pub(crate) fn failure_reason(e: &std::io::Error) -> &'static str {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "closed",
            _ => "io",
        };
    };
    match tls {
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => "not_tls",
        rustls::Error::NoCertificatesPresented => "no_client_certificate",
        rustls::Error::InvalidCertificate(_) => "bad_client_certificate",
        rustls::Error::PeerIncompatible(_) | rustls::Error::NoApplicationProtocol => "incompatible",
        rustls::Error::AlertReceived(_) => "alert_received",
        _ => "other",
    }
}

/// A gRPC channel to `host:port` over TLS with `config` (ALPN `h2` is set here), for
/// clients of a TLS listener: the CLI's `grpcs://`, and tests. The name checked in the
/// server's certificate is `host`.
pub async fn grpc_channel(
    authority: &str,
    config: rustls::ClientConfig,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    grpc_channel_named(authority, None, config).await
}

/// [`grpc_channel`], checking `server_name` in the server's certificate instead of the
/// host when given (the reference's `CONFIG_GRPC_XDS_SERVER_TLS_SAN`).
pub async fn grpc_channel_named(
    authority: &str,
    server_name: Option<&str>,
    mut config: rustls::ClientConfig,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let host = server_name
        .unwrap_or_else(|| authority.rsplit_once(':').map_or(authority, |(h, _)| h))
        .trim_matches(['[', ']'])
        .to_owned();
    let authority = authority.to_owned();
    tonic::transport::Endpoint::from_shared(format!("http://{authority}"))?
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let (connector, host, authority) = (connector.clone(), host.clone(), authority.clone());
            async move {
                let name = rustls::pki_types::ServerName::try_from(host)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                let tcp = tokio::net::TcpStream::connect(&authority).await?;
                let _ = tcp.set_nodelay(true);
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
}
