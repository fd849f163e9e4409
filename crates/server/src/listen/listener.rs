//! Where connections come from: a TCP listener (its first byte waited for, then its
//! TLS handshake when asked), or a Unix socket.

use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::either::Either;

use super::{Limits, ListenerTls};
use crate::metrics;
use crate::tls::ClientCert;

/// What [`serve`](super::serve) accepts connections from: a TCP listener (over TLS when asked), or a
/// Unix socket (`GRPC_UDS`: local callers only, so plaintext, and no first-byte wait).
pub trait Listener: Send + 'static {
    /// An accepted connection.
    type Stream: Send + 'static;
    /// The connection as HTTP is spoken over it.
    type Io: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static;

    /// The next connection.
    fn accept(&self) -> impl Future<Output = std::io::Result<Self::Stream>> + Send;

    /// The connection's peer, where it has an address.
    fn peer(_stream: &Self::Stream) -> Option<std::net::SocketAddr> {
        None
    }

    /// Readies an accepted connection: its first byte waited for (within the header
    /// timeout), then the TLS handshake; with whether its client presented a
    /// certificate, over mutual TLS. `None`: it was closed instead.
    fn open(
        stream: Self::Stream,
        tls: Option<ListenerTls>,
        limits: Limits,
    ) -> impl Future<Output = Option<(Self::Io, Option<ClientCert>)>> + Send;
}

/// A peer gone without a word (a crash, a cut network) is found by the kernel's TCP
/// keepalive probes: after 30 s of silence, then every 10 s, closed after as many
/// unanswered as the system says (9 on Linux: two minutes). Not HTTP/2 PINGs: with
/// them hyper takes a lock shared by the connection's streams, and reads the clock, on
/// every frame received.
const KEEPALIVE: socket2::TcpKeepalive = socket2::TcpKeepalive::new()
    .with_time(std::time::Duration::from_secs(30))
    .with_interval(std::time::Duration::from_secs(10));

impl Listener for TcpListener {
    type Stream = tokio::net::TcpStream;
    type Io = TokioIo<
        Either<tokio::net::TcpStream, tokio_rustls::server::TlsStream<tokio::net::TcpStream>>,
    >;

    async fn accept(&self) -> std::io::Result<Self::Stream> {
        let (stream, _peer) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&KEEPALIVE);
        Ok(stream)
    }

    fn peer(stream: &Self::Stream) -> Option<std::net::SocketAddr> {
        stream.peer_addr().ok()
    }

    async fn open(
        stream: Self::Stream,
        tls: Option<ListenerTls>,
        limits: Limits,
    ) -> Option<(Self::Io, Option<ClientCert>)> {
        open_tcp(stream, tls, limits)
            .await
            .map(|(io, presented)| (TokioIo::new(io), presented))
    }
}

impl Listener for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    type Io = TokioIo<tokio::net::UnixStream>;

    async fn accept(&self) -> std::io::Result<Self::Stream> {
        tokio::net::UnixListener::accept(self)
            .await
            .map(|(stream, _)| stream)
    }

    async fn open(
        stream: Self::Stream,
        _tls: Option<ListenerTls>,
        _limits: Limits,
    ) -> Option<(Self::Io, Option<ClientCert>)> {
        Some((TokioIo::new(stream), None))
    }
}

/// Binds a Unix socket at `path`, replacing a socket file left there by an earlier
/// run (anything else there is an error, not removed).
pub fn bind_unix(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.file_type().is_socket()
    {
        std::fs::remove_file(path)?;
    }
    tokio::net::UnixListener::bind(path)
}

/// A TCP connection readied for HTTP: its first byte waited for, then its TLS
/// handshake (when asked); `None` when it was closed instead.
pub(super) async fn open_tcp(
    stream: tokio::net::TcpStream,
    tls: Option<ListenerTls>,
    limits: Limits,
) -> Option<(
    Either<tokio::net::TcpStream, tokio_rustls::server::TlsStream<tokio::net::TcpStream>>,
    Option<ClientCert>,
)> {
    let name = limits.name;
    // hyper's header timeout starts with the first bytes (after it has sniffed HTTP/1
    // or 2): a client that connects and sends nothing gets the same time to send its
    // first byte, then is closed.
    let mut first = [0u8; 1];
    if tokio::time::timeout(limits.header_read, stream.peek(&mut first))
        .await
        .is_err()
    {
        tracing::debug!(
            listener = name,
            "connection closed: nothing sent within the header timeout"
        );
        return None;
    }
    let (io, presented) = match tls {
        None => (Either::Left(stream), None),
        Some(tls) => {
            let handshake = tls.certs.acceptor(tls.strict).accept(stream);
            let stream = match tokio::time::timeout(limits.header_read, handshake).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    let reason = crate::tls::failure_reason(&e);
                    metrics::tls_handshake_failure(name, reason);
                    tracing::debug!(listener = name, reason, error = %e, "TLS handshake failed");
                    return None;
                }
                Err(_) => {
                    metrics::tls_handshake_failure(name, "timeout");
                    tracing::debug!(listener = name, "TLS handshake timed out");
                    return None;
                }
            };
            // Over mutual TLS, each request says whether its client presented a
            // certificate (the routers let one without reach the health probes only).
            let presented = tls
                .certs
                .mutual()
                .then(|| ClientCert::of(stream.get_ref().1.peer_certificates()));
            (Either::Right(stream), presented)
        }
    };
    Some((io, presented))
}
