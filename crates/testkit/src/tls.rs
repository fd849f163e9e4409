//! Test certificates, made by the test that needs them (rcgen): a CA of the test's own,
//! and leaf certificates from it that are good, expired, not yet valid, or for another
//! name, as PEM files in a scratch directory. The shared TLS servers' files, made by
//! `scripts/test` with openssl, are found with [`shared_files`].

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, date_time_ymd,
};

/// A certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct Pair {
    /// PEM certificate.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

/// What a client needs: the CA to trust and the certificate to present.
#[derive(Clone, Debug)]
pub struct Files {
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The client certificate and key.
    pub client: Pair,
}

/// How a leaf certificate is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaf {
    /// Names exactly these (DNS names, IP addresses, or `spiffe://` URIs), valid now.
    Names(&'static [&'static str]),
    /// Names 127.0.0.1 and localhost, valid now.
    Good,
    /// Ended in 2021.
    Expired,
    /// Starts in 2099.
    NotYetValid,
    /// Names `other.example` only.
    OtherName,
}

/// A CA of the test's own, writing its certificates into a scratch directory.
pub struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").field("dir", &self.dir).finish()
    }
}

impl Pki {
    /// A new CA (`ca.crt`) in a fresh directory named after `name`.
    pub fn new(name: &str) -> Pki {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let dir = std::env::temp_dir().join(format!("spillway-pki-{name}-{random:016x}"));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("Spillway test CA {name}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key"))
            .expect("a CA certificate");
        std::fs::write(dir.join("ca.crt"), ca.pem()).expect("write ca.crt");
        Pki { dir, ca }
    }

    /// The CA's certificate file.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The scratch directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A leaf certificate from this CA, for servers and clients alike, written as
    /// `<stem>.crt` and `<stem>.key` (an EC P-256 key in PKCS#8).
    pub fn issue(&self, stem: &str, leaf: Leaf) -> Pair {
        let names = match leaf {
            Leaf::OtherName => vec!["other.example"],
            Leaf::Names(names) => names.to_vec(),
            _ => vec!["127.0.0.1", "localhost"],
        };
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("leaf parameters");
        params.subject_alt_names = names
            .iter()
            .map(|n| {
                if let Ok(ip) = n.parse::<std::net::IpAddr>() {
                    SanType::IpAddress(ip)
                } else if n.contains("://") {
                    SanType::URI((*n).try_into().expect("a URI"))
                } else {
                    SanType::DnsName((*n).try_into().expect("a DNS name"))
                }
            })
            .collect();
        params.distinguished_name.push(DnType::CommonName, stem);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        match leaf {
            Leaf::Expired => {
                params.not_before = date_time_ymd(2020, 1, 1);
                params.not_after = date_time_ymd(2021, 1, 1);
            }
            Leaf::NotYetValid => {
                params.not_before = date_time_ymd(2099, 1, 1);
                params.not_after = date_time_ymd(2100, 1, 1);
            }
            Leaf::Good | Leaf::OtherName | Leaf::Names(_) => {}
        }
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &self.ca)
            .expect("a leaf certificate");
        let pair = Pair {
            cert: self.dir.join(format!("{stem}.crt")),
            key: self.dir.join(format!("{stem}.key")),
        };
        std::fs::write(&pair.cert, cert.pem()).expect("write the certificate");
        std::fs::write(&pair.key, key.serialize_pem()).expect("write the key");
        pair
    }

    /// A good client certificate and this CA: what a client of a server from
    /// [`issue`](Self::issue) needs.
    pub fn client(&self) -> Files {
        Files {
            ca: self.ca(),
            client: self.issue("client", Leaf::Good),
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The files of the shared TLS servers `scripts/test` starts (`SPILLWAY_TEST_TLS_DIR`).
pub fn shared_files() -> Files {
    let dir = PathBuf::from(crate::redis::shared("SPILLWAY_TEST_TLS_DIR"));
    Files {
        ca: dir.join("ca.crt"),
        client: Pair {
            cert: dir.join("client.crt"),
            key: dir.join("client.key"),
        },
    }
}

/// A TLS client trusting `ca` (PEM file), presenting `client` when given; ALPN as
/// given.
pub fn client_config(ca: &Path, client: Option<&Pair>, alpn: &[&[u8]]) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::ring::default_provider()));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("the CA file") {
        roots
            .add(cert.expect("a CA certificate"))
            .expect("a usable CA");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(pair) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&pair.cert)
                    .expect("the client certificate")
                    .map(|c| c.expect("a certificate"))
                    .collect(),
                PrivateKeyDer::from_pem_file(&pair.key).expect("the client key"),
            )
            .expect("a usable client certificate"),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// A TLS connection to `addr` (its name checked as `127.0.0.1`), handshake done.
pub async fn connect(
    addr: std::net::SocketAddr,
    config: rustls::ClientConfig,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
}

/// One HTTP/1.1 request over a new TLS connection (`Connection: close`): the status and
/// the body, or the error that ended it (a refused client certificate shows here, on
/// TLS 1.3, after the handshake seemed done).
pub async fn https(
    addr: std::net::SocketAddr,
    config: rustls::ClientConfig,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tls = connect(addr, config).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    tls.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:?}")))?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    Ok((status, body))
}

/// Certificates made as Envoy Gateway makes its own (`certgen`), with Debian's openssl:
/// RSA-2048 keys in PKCS#1 (`RSA PRIVATE KEY`), leaf certificates without extended key
/// usage, a server certificate naming `envoy-gateway` (and 127.0.0.1), and one client
/// certificate, all from one CA, in `dir`.
#[derive(Clone, Debug)]
pub struct GatewayCerts {
    pub ca: PathBuf,
    pub server: Pair,
    pub client: Pair,
}

/// Makes [`GatewayCerts`] in `dir` (which must exist).
pub fn envoy_gateway_certs(dir: &Path) -> GatewayCerts {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs (scripts/test installs it)");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    openssl(&["genrsa", "-traditional", "-out", "eg-ca.key", "2048"]);
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "eg-ca.key",
        "-days",
        "30",
        "-subj",
        "/CN=envoy-gateway",
        "-out",
        "eg-ca.crt",
    ]);
    for (stem, san) in [
        (
            "eg-server",
            "subjectAltName=DNS:envoy-gateway,DNS:envoy-gateway.envoy-gateway-system,IP:127.0.0.1\n",
        ),
        ("eg-client", "subjectAltName=DNS:envoy-ratelimit\n"),
    ] {
        openssl(&[
            "genrsa",
            "-traditional",
            "-out",
            &format!("{stem}.key"),
            "2048",
        ]);
        openssl(&[
            "req",
            "-new",
            "-key",
            &format!("{stem}.key"),
            "-subj",
            &format!("/CN={stem}"),
            "-out",
            &format!("{stem}.csr"),
        ]);
        std::fs::write(dir.join(format!("{stem}.ext")), san).expect("write the extensions");
        openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{stem}.csr"),
            "-CA",
            "eg-ca.crt",
            "-CAkey",
            "eg-ca.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            &format!("{stem}.ext"),
            "-out",
            &format!("{stem}.crt"),
        ]);
    }
    let pair = |stem: &str| Pair {
        cert: dir.join(format!("{stem}.crt")),
        key: dir.join(format!("{stem}.key")),
    };
    GatewayCerts {
        ca: dir.join("eg-ca.crt"),
        server: pair("eg-server"),
        client: pair("eg-client"),
    }
}

/// Replaces `path` with `from`'s content as Kubernetes does: written beside it, then
/// renamed over it (one change, never a half-written file).
pub fn replace(path: &Path, from: &Path) {
    let tmp = path.with_extension("tmp");
    std::fs::copy(from, &tmp).expect("copy beside the file");
    std::fs::rename(&tmp, path).expect("rename over the file");
}

/// The first certificate of a PEM file, as DER (to compare with what a server presents).
pub fn certificate_der(pem: &Path) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_file(pem)
        .expect("a PEM certificate")
        .to_vec()
}

/// The leaf certificate a new handshake on `addr` presents (DER).
pub async fn presented(addr: std::net::SocketAddr, config: rustls::ClientConfig) -> Vec<u8> {
    let tls = connect(addr, config).await.expect("a handshake");
    tls.get_ref().1.peer_certificates().expect("a certificate")[0].to_vec()
}
