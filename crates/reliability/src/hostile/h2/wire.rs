//! HTTP/2 on the wire, as the hostile clients speak it: the connection (plaintext or
//! TLS), frames and HPACK written by hand (so they can be wrong), and reading what the
//! server sent back (streams ended, a GOAWAY, the close).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub(super) const RLS: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
pub(super) const HEALTH: &str = "/grpc.health.v1.Health/Check";

/// A connection to the gRPC port, plaintext (h2c) or TLS (h2, ALPN).
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub(super) type Conn = Box<dyn Io>;

/// How the hostile client reaches the gRPC port.
#[derive(Clone)]
pub enum Transport {
    /// h2c: HTTP/2 on plain TCP.
    Plain,
    /// h2 over TLS, with this client's configuration (its certificate, ALPN `h2`).
    Tls(Arc<rustls::ClientConfig>),
}

impl Transport {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Transport::Plain => "h2c",
            Transport::Tls(_) => "h2 over TLS",
        }
    }

    /// A connection, the TLS handshake done: nothing of HTTP/2 sent yet.
    pub(super) async fn open(&self, addr: SocketAddr) -> std::io::Result<Conn> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        match self {
            Transport::Plain => Ok(Box::new(tcp)),
            Transport::Tls(config) => {
                let name = rustls::pki_types::ServerName::try_from("localhost")
                    .expect("a name")
                    .to_owned();
                let tls = tokio_rustls::TlsConnector::from(Arc::clone(config))
                    .connect(name, tcp)
                    .await?;
                Ok(Box::new(tls))
            }
        }
    }
}

/// Reads until the server closes (or 10 s): what ended the connection.
pub(super) async fn ended(c: &mut Conn) -> String {
    let mut buf = vec![0u8; 65_536];
    let mut goaway = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, c.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                if goaway.is_none() {
                    goaway = find_goaway(&buf[..n]);
                }
            }
            Err(_) => return "still open after 10 s".into(),
        }
    }
    match goaway {
        Some(code) => format!("GOAWAY {}, closed", error_name(code)),
        None => "closed".into(),
    }
}

/// Reads `c` until `streams` streams have ended (an END_STREAM HEADERS or DATA, or a
/// RST_STREAM) or `within` passes: how many did.
pub(super) async fn count_ends(c: &mut Conn, streams: usize, within: Duration) -> usize {
    let mut buf = Vec::new();
    let mut ended = std::collections::HashSet::new();
    let deadline = Instant::now() + within;
    let mut chunk = vec![0u8; 65_536];
    while ended.len() < streams {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, c.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break,
        }
        // Whole frames, from the start of the buffer.
        let mut at = 0;
        while buf.len() >= at + 9 {
            let len = u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]]) as usize;
            if buf.len() < at + 9 + len {
                break;
            }
            let (kind, flags) = (buf[at + 3], buf[at + 4]);
            let id = u32::from_be_bytes([buf[at + 5], buf[at + 6], buf[at + 7], buf[at + 8]])
                & 0x7fff_ffff;
            if id != 0 && (kind == 0x3 || (matches!(kind, 0x0 | 0x1) && flags & 0x1 != 0)) {
                ended.insert(id);
            }
            at += 9 + len;
        }
        buf.drain(..at);
    }
    ended.len()
}

/// Whether the server has closed `c` (an EOF or an error waiting to be read), without
/// waiting.
pub(super) fn closed_now(c: &mut Conn) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match c.read(&mut buf).now_or_never() {
            Some(Ok(0) | Err(_)) => return true,
            Some(Ok(_)) => continue,
            None => return false,
        }
    }
}

/// Whether the server closes `c` within `within`.
pub(super) async fn until_eof(c: &mut Conn, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, c.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// The error code of the first GOAWAY among whole frames at the start of `bytes`.
pub(super) fn find_goaway(bytes: &[u8]) -> Option<u32> {
    let mut at = 0;
    while bytes.len() >= at + 9 {
        let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
        if bytes[at + 3] == 0x7 && bytes.len() >= at + 9 + 8 {
            let p = at + 9 + 4;
            return Some(u32::from_be_bytes([
                bytes[p],
                bytes[p + 1],
                bytes[p + 2],
                bytes[p + 3],
            ]));
        }
        at += 9 + len;
    }
    None
}

pub(super) fn error_name(code: u32) -> &'static str {
    match code {
        0 => "NO_ERROR",
        1 => "PROTOCOL_ERROR",
        2 => "INTERNAL_ERROR",
        3 => "FLOW_CONTROL_ERROR",
        6 => "FRAME_SIZE_ERROR",
        9 => "COMPRESSION_ERROR",
        11 => "ENHANCE_YOUR_CALM",
        _ => "other",
    }
}

/// A TCP connection that has sent the preface and an empty SETTINGS.
pub(super) async fn connect(t: &Transport, addr: SocketAddr) -> std::io::Result<Conn> {
    let mut c = t.open(addr).await?;
    let mut w = PREFACE.to_vec();
    w.extend(frame(0x4, 0, 0, &[]));
    c.write_all(&w).await?;
    Ok(c)
}

/// One frame.
pub(super) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A gRPC call's HEADERS on `stream` (END_HEADERS; END_STREAM when `end`).
pub(super) fn headers(stream: u32, path: &str, end: bool) -> Vec<u8> {
    frame(
        0x1,
        0x4 | if end { 0x1 } else { 0 },
        stream,
        &request_block(path),
    )
}

pub(super) fn request_block(path: &str) -> Vec<u8> {
    [
        hpack(":method", "POST"),
        hpack(":scheme", "http"),
        hpack(":path", path),
        hpack(":authority", "spillway"),
        hpack("content-type", "application/grpc"),
        hpack("te", "trailers"),
    ]
    .concat()
}

/// A header as HPACK's literal without indexing, new name, no Huffman.
pub(super) fn hpack(name: &str, value: &str) -> Vec<u8> {
    let mut out = vec![0x00];
    for s in [name, value] {
        out.extend(integer(s.len(), 7));
        out.extend_from_slice(s.as_bytes());
    }
    out
}

/// HPACK's integer with an N-bit prefix (the flag bits above it are 0).
pub(super) fn integer(mut n: usize, prefix: u32) -> Vec<u8> {
    let max = (1usize << prefix) - 1;
    if n < max {
        return vec![n as u8];
    }
    let mut out = vec![max as u8];
    n -= max;
    while n >= 128 {
        out.push((n % 128 + 128) as u8);
        n /= 128;
    }
    out.push(n as u8);
    out
}
