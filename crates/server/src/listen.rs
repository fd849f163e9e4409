//! Serving a router on a listener: HTTP/1 and HTTP/2 (gRPC) on one accept loop, over
//! TLS when asked (`tls.rs`), a timeout on each of the first byte, the TLS handshake
//! and the headers so a slow client cannot hold a connection open for free, an idle
//! timeout for a connection with no request in flight, an optional cap on open
//! connections, and a graceful shutdown that stops accepting and lets requests in
//! flight finish.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::metrics;
use crate::tls::{Certs, ClientCert, TlsFiles};

/// TLS on one listener.
#[derive(Clone, Debug)]
pub struct ListenerTls {
    pub certs: Arc<Certs>,
    /// Client certificates required at the handshake (with a client CA): gRPC. The
    /// HTTP listeners verify one when presented and let health probes in without.
    pub strict: bool,
}

/// Spawns [`serve`] of `app` over TLS from `files`, client certificates required at
/// the handshake, until `shutdown`: a peer for tests (the ADS server the xDS and the
/// Envoy Gateway tests run), with 5 s for headers and 100 ms to drain.
#[doc(hidden)]
pub fn spawn_mutual_tls(
    listener: TcpListener,
    app: Router,
    files: TlsFiles,
    name: &'static str,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let tls = ListenerTls {
        certs: Certs::load(files)?,
        strict: true,
    };
    let limits = Limits {
        drain: Duration::from_millis(100),
        ..Limits::new(name)
    };
    tokio::spawn(serve(listener, app, shutdown, limits, Some(tls)));
    Ok(())
}

/// Streams one HTTP/2 connection may have open at once.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;

/// The most bytes of headers one HTTP/2 request may have.
pub const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// What one listener allows a client: how long it may take, how long it may stay
/// idle, and how many connections may be open at once.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The listener's name in metrics and logs (`http`, `grpc`, `admin`, `metrics`).
    pub name: &'static str,
    /// How long a client may take to send a request's headers (and its first byte,
    /// and the TLS handshake).
    pub header_read: Duration,
    /// A connection with no request in flight for this long is closed (HTTP/2: GOAWAY,
    /// then closed); `Duration::ZERO`: never.
    pub idle: Duration,
    /// Connections open at once; one more is closed as soon as it is accepted.
    /// `None`: no cap (the file descriptor limit is the cap).
    pub max_connections: Option<usize>,
    /// How long requests in flight may take to finish after shutdown begins.
    pub drain: Duration,
    /// Connections older than this are asked to go away; `None`: never.
    pub max_age: Option<MaxAge>,
}

/// How old a connection may grow before it is asked to go away (HTTP/2 GOAWAY, HTTP/1
/// `Connection: close` after the response in flight), as gRPC servers'
/// `MaxConnectionAge`: a client with a connection for ever would otherwise never reach
/// a replica added after it connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxAge {
    /// The age; each connection's is less, by up to a tenth at random, so that the
    /// connections made at one moment (a restart's) do not all go away at once.
    pub age: Duration,
    /// How long the calls in flight then have to finish before the connection is
    /// closed.
    pub grace: Duration,
}

impl MaxAge {
    /// This connection's age: `age` less a random part of up to a tenth of it.
    fn jittered(&self) -> Duration {
        let tenth = self.age / 10;
        let less = tenth.mul_f64(rand::random::<f64>());
        self.age - less
    }
}

impl Limits {
    /// The service's defaults (`header_read_timeout`, `idle_timeout`,
    /// `drain_timeout`, no cap) on the listener `name`.
    pub fn new(name: &'static str) -> Limits {
        Limits {
            name,
            header_read: Duration::from_secs(5),
            idle: Duration::from_secs(300),
            max_connections: None,
            drain: Duration::from_secs(10),
            max_age: None,
        }
    }
}

/// What [`serve`] accepts connections from: a TCP listener (over TLS when asked), or a
/// Unix socket (`GRPC_UDS`: local callers only, so plaintext, and no first-byte wait).
pub trait Listener: Send + 'static {
    /// An accepted connection.
    type Stream: Send + 'static;
    /// The connection as HTTP is spoken over it.
    type Io: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static;

    /// The next connection.
    fn accept(&self) -> impl Future<Output = std::io::Result<Self::Stream>> + Send;

    /// Readies an accepted connection: its first byte waited for (within the header
    /// timeout), then the TLS handshake; with whether its client presented a
    /// certificate, over mutual TLS. `None`: it was closed instead.
    fn open(
        stream: Self::Stream,
        tls: Option<ListenerTls>,
        limits: Limits,
    ) -> impl Future<Output = Option<(Self::Io, Option<ClientCert>)>> + Send;
}

impl Listener for TcpListener {
    type Stream = tokio::net::TcpStream;
    type Io = TokioIo<
        Either<tokio::net::TcpStream, tokio_rustls::server::TlsStream<tokio::net::TcpStream>>,
    >;

    async fn accept(&self) -> std::io::Result<Self::Stream> {
        let (stream, _peer) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
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

/// What a listener serves: an axum router, or the gRPC edge around tonic's routes.
pub trait App<B>:
    tower::Service<Request<Incoming>, Response = axum::http::Response<B>, Error = Infallible>
    + Clone
    + Send
    + 'static
where
    Self::Future: Send,
{
}

impl<S, B> App<B> for S
where
    S: tower::Service<Request<Incoming>, Response = axum::http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then drains.
pub async fn serve<L, A, B>(
    listener: L,
    app: A,
    shutdown: CancellationToken,
    limits: Limits,
    tls: Option<ListenerTls>,
) where
    L: Listener,
    A: App<B>,
    A::Future: Send,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30))
        // The least HTTP/2 asks a server to allow; Envoy opens another connection when
        // a pool's streams are all in use. A stalled stream is ended by the gRPC
        // router's deadline, so one client cannot hold them for ever.
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        // A request's headers, at most (h2's default is 16 MiB, which a CONTINUATION
        // flood fills before it is refused); Envoy's own default is 60 KiB.
        .max_header_list_size(MAX_HEADER_LIST_BYTES);
    let connections = TaskTracker::new();
    let cap = limits.max_connections.map(|n| Arc::new(Semaphore::new(n)));
    let name = limits.name;

    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before accept:
                    // back off a little instead of spinning.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // At the cap, the new connection is closed at once (the kernel's backlog is
        // not left to fill), and the ones open keep being served.
        let permit = match &cap {
            None => None,
            Some(cap) => match Arc::clone(cap).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    metrics::connection_refused(name);
                    drop(stream);
                    continue;
                }
            },
        };
        let (builder, app, tls, shutdown) =
            (builder.clone(), app.clone(), tls.clone(), shutdown.clone());
        connections.spawn(async move {
            let _permit = permit;
            metrics::connection_opened(name);
            if let Some((io, presented)) = L::open(stream, tls, limits).await {
                connection(io, presented, builder, app, limits, shutdown).await;
            }
            metrics::connection_closed(name);
        });
    }
    drop(listener);
    connections.close();
    tokio::select! {
        () = connections.wait() => {}
        () = tokio::time::sleep(limits.drain) => {
            tracing::warn!(listener = name, after = ?limits.drain, "requests still in flight at the end of the drain");
        }
    }
}

/// A TCP connection readied for HTTP: its first byte waited for, then its TLS
/// handshake (when asked); `None` when it was closed instead.
async fn open_tcp(
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
                .then(|| ClientCert(stream.get_ref().1.peer_certificates().is_some()));
            (Either::Right(stream), presented)
        }
    };
    Some((io, presented))
}

/// One readied connection, from its first request to its close.
async fn connection<I, A, B>(
    io: I,
    presented: Option<ClientCert>,
    builder: Builder<TokioExecutor>,
    app: A,
    limits: Limits,
    shutdown: CancellationToken,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    A: App<B>,
    A::Future: Send,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let name = limits.name;
    // Each request is in flight until its response body is done (or dropped); the
    // connection is idle while none is.
    let activity = Arc::new(Activity::new());
    let service = tower::service_fn({
        let activity = Arc::clone(&activity);
        move |mut request: Request<Incoming>| {
            if let Some(presented) = presented {
                request.extensions_mut().insert(presented);
            }
            let busy = Busy::start(Arc::clone(&activity));
            let answer = app.clone().oneshot(request);
            async move {
                let response = answer.await?;
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _busy: busy }))
            }
        }
    });
    let conn = builder.serve_connection(io, TowerToHyperService::new(service));
    let mut conn = pin!(conn);
    let mut closing = false;
    // After an idle close begins, how long the client has to let it finish: HTTP/2's
    // graceful close waits for a PING's answer, which a hostile client never sends.
    let mut dropped_at: Option<Instant> = None;
    let aged_at = limits
        .max_age
        .map(|m| (Instant::now() + m.jittered(), m.grace));
    loop {
        let age_check = async {
            match aged_at {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let idle_check = async {
            match activity.idle_deadline(limits.idle) {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let give_up = async {
            match dropped_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = give_up => {
                tracing::debug!(listener = name, "a connection asked to go away did not close: dropped");
                return;
            }
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(listener = name, error = %e, "connection ended with an error");
                }
                return;
            }
            () = shutdown.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            () = age_check, if !closing => {
                // Asked to go away; its calls in flight have the grace to finish.
                closing = true;
                let grace = aged_at.map_or(Duration::ZERO, |(_, grace)| grace);
                dropped_at = Some(Instant::now() + grace);
                metrics::connection_aged_out(name);
                tracing::debug!(listener = name, "connection at its maximum age: asked to go away");
                conn.as_mut().graceful_shutdown();
            }
            () = idle_check, if !closing => {
                if activity.idle_for(limits.idle) {
                    closing = true;
                    dropped_at = Some(Instant::now() + limits.header_read);
                    metrics::connection_idle_closed(name);
                    tracing::debug!(listener = name, idle = ?limits.idle, "idle connection closed");
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// What one connection is doing: requests in flight, and when the last one started or
/// ended (on tokio's clock, as every network timeout here).
struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    /// Since `born`, in milliseconds.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    /// When the connection will have been idle for `idle`, if nothing happens first;
    /// `None` when there is no idle timeout.
    fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        if idle.is_zero() {
            return None;
        }
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        Some(self.born + last + idle)
    }

    /// No request in flight, and none started or ended for `idle`.
    fn idle_for(&self, idle: Duration) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
            && self
                .idle_deadline(idle)
                .is_some_and(|at| at <= Instant::now())
    }
}

/// One request in flight on a connection, from its arrival until its response body
/// ends or is dropped.
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: Arc<Activity>) -> Busy {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.touch();
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request in flight until it is done.
    struct Tracked<B> {
        #[pin]
        body: B,
        _busy: Busy,
    }
}

impl<B: http_body::Body> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
