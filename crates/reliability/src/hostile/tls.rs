//! Hostile input at the TLS layer: a service serving TLS on gRPC and HTTP with mutual
//! TLS, and clients that speak plaintext, present a certificate from another CA or an
//! expired one, stall in the handshake, or send a ClientHello larger than any real one.
//! Each must be closed within the handshake timeout and counted
//! (`spillway_tls_handshake_failures_total`), with no panic, while a good client is
//! served between them.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use spillway_testkit::tls::{Leaf, Pair, Pki, client_config, https};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Policy;
use crate::trial::service_settings;

/// One hostile client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsCase {
    /// An HTTP/1.1 request in plaintext on the TLS port.
    Plaintext,
    /// A client certificate from a CA the service does not trust.
    ForeignCertificate,
    /// A client certificate from the right CA, expired.
    ExpiredCertificate,
    /// The first bytes of a ClientHello, then nothing.
    StalledHandshake,
    /// A ClientHello announcing 16 MiB.
    OversizedClientHello,
}

impl TlsCase {
    pub const ALL: [TlsCase; 5] = [
        TlsCase::Plaintext,
        TlsCase::ForeignCertificate,
        TlsCase::ExpiredCertificate,
        TlsCase::StalledHandshake,
        TlsCase::OversizedClientHello,
    ];

    fn name(self) -> &'static str {
        match self {
            TlsCase::Plaintext => "plaintext HTTP on the TLS port",
            TlsCase::ForeignCertificate => "client certificate from another CA",
            TlsCase::ExpiredCertificate => "expired client certificate",
            TlsCase::StalledHandshake => "handshake started, never finished",
            TlsCase::OversizedClientHello => "ClientHello announcing 16 MiB",
        }
    }
}

/// What one hostile client got.
#[derive(Clone, Debug)]
pub struct TlsReport {
    pub case: TlsCase,
    /// Closed by the service, and after how long.
    pub closed: Option<Duration>,
    /// Handshake failures the service counted meanwhile (every reason, HTTP listener).
    pub counted: u64,
    /// A good client was answered 200 right after.
    pub others_served: bool,
}

impl TlsReport {
    /// Closed within the handshake timeout and a margin, counted, others served.
    pub fn ok(&self, timeout: Duration) -> bool {
        self.closed
            .is_some_and(|d| d < timeout + Duration::from_secs(2))
            && self.counted >= 1
            && self.others_served
    }
}

/// The table's header, for [`TlsReport`]'s rows.
pub const TLS_HEADER: &str =
    "| client | closed after ms | counted | others served |\n|---|---|---|---|";

impl fmt::Display for TlsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "| {} | {} | {} | {} |",
            self.case.name(),
            self.closed.map_or("not closed".into(), |d| format!(
                "{:.0}",
                d.as_secs_f64() * 1e3
            )),
            self.counted,
            if self.others_served { "yes" } else { "no" }
        )
    }
}

/// Every [`TlsCase`] against a service whose handshake timeout is `timeout`.
pub async fn tls_clients(timeout: Duration) -> anyhow::Result<Vec<TlsReport>> {
    let (pki, other) = (Pki::new("hostile"), Pki::new("hostile-other"));
    let server = pki.issue("server", Leaf::Good);
    let good = pki.issue("client", Leaf::Good);
    let expired = pki.issue("expired", Leaf::Expired);
    let foreign = other.issue("foreign", Leaf::Good);
    let mut settings = service_settings("hostile-tls", Policy::Closed, "memory".into())?;
    settings.tls.cert = Some(server.cert.clone());
    settings.tls.key = Some(server.key.clone());
    settings.tls.client_ca = Some(pki.ca());
    settings.listen.header_read_timeout = timeout;
    let running = crate::trial::start(settings.clone()).await?;
    let http = running.http_addr;
    let ca = pki.ca();
    let failures = || async {
        let (_, metrics) = https(
            http,
            client_config(&ca, Some(&good), &[]),
            "GET",
            "/metrics",
            "",
        )
        .await
        .unwrap_or_default();
        spillway_testkit::metric(
            &metrics,
            "spillway_tls_handshake_failures_total{listener=\"http\"",
        )
    };
    let mut reports = Vec::new();
    for case in TlsCase::ALL {
        let before = failures().await;
        let start = tokio::time::Instant::now();
        let closed = hostile(case, http, &ca, &foreign, &expired).await;
        let closed = closed.then(|| start.elapsed());
        // The count lands when the server's task ends the connection.
        let mut counted = 0;
        for _ in 0..100 {
            counted = failures().await.saturating_sub(before);
            if counted > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let check =
            r#"{"domain":"reliability","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}"#;
        let others_served = matches!(
            https(
                http,
                client_config(&ca, Some(&good), &[]),
                "POST",
                "/v1/check",
                check
            )
            .await,
            Ok((200, _))
        );
        reports.push(TlsReport {
            case,
            closed,
            counted,
            others_served,
        });
    }
    running.stop().await;
    let _ = std::fs::remove_dir_all(&settings.rules.path);
    Ok(reports)
}

/// Runs one hostile client; whether the service closed its connection within 10 s.
async fn hostile(
    case: TlsCase,
    addr: SocketAddr,
    ca: &std::path::Path,
    foreign: &Pair,
    expired: &Pair,
) -> bool {
    let refused = |client: &Pair| {
        let config = client_config(ca, Some(client), &[]);
        async move { https(addr, config, "GET", "/healthz", "").await.is_err() }
    };
    let raw = |bytes: Vec<u8>| async move {
        let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else {
            return false;
        };
        if tcp.write_all(&bytes).await.is_err() {
            return true;
        }
        // Until the service closes: EOF or a reset (an alert may come first).
        let mut buf = [0u8; 4096];
        let read_to_end = async {
            loop {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), read_to_end)
            .await
            .is_ok()
    };
    match case {
        TlsCase::Plaintext => {
            raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec()).await
        }
        TlsCase::ForeignCertificate => refused(foreign).await,
        TlsCase::ExpiredCertificate => refused(expired).await,
        TlsCase::StalledHandshake => raw(vec![0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await,
        TlsCase::OversizedClientHello => {
            // A handshake record whose ClientHello claims 16 MiB, and 16 KiB of it.
            let mut bytes = vec![0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0xff, 0xff, 0xff];
            bytes.resize(5 + 0x4000, 0x41);
            raw(bytes).await
        }
    }
}
