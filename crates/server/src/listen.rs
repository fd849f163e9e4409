//! Serving a router on a listener: HTTP/1 and HTTP/2 (gRPC) on one accept loop, over
//! TLS when asked (`tls.rs`), a timeout on each of the first byte, the TLS handshake
//! and the headers so a slow client cannot hold a connection open for free, an idle
//! timeout for a connection with no request in flight, an optional cap on open
//! connections, and a graceful shutdown that stops accepting and lets requests in
//! flight finish.

use std::convert::Infallible;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::TcpConnectInfo;
use tower::ServiceExt;

mod activity;
mod listener;

use crate::metrics;
use crate::tls::{Certs, ClientCert, TlsFiles};
use activity::{Activity, Busy, Tracked};
pub use listener::{Listener, bind_unix};

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

/// What a listener serves: an axum router, or the gRPC edge around tonic's routes.
/// (Its future must be `Send` too, which each use says: a trait's `where` clause on
/// an associated type is not carried to the places that use the trait.)
pub trait App<B>:
    tower::Service<Request<Incoming>, Response = axum::http::Response<B>, Error = Infallible>
    + Clone
    + Send
    + 'static
{
}

impl<S, B> App<B> for S where
    S: tower::Service<Request<Incoming>, Response = axum::http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static
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
        // No keep-alive PINGs: TCP keepalive finds a peer gone (`listener.rs`).
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
            let peer = L::peer(&stream);
            if let Some((io, presented)) = L::open(stream, tls, limits).await {
                connection(io, presented, peer, builder, app, limits, shutdown).await;
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

/// One readied connection, from its first request to its close.
async fn connection<I, A, B>(
    io: I,
    presented: Option<ClientCert>,
    peer: Option<std::net::SocketAddr>,
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
            if let Some(presented) = &presented {
                request.extensions_mut().insert(presented.clone());
            }
            // The peer, where a service reads it (tonic's `remote_addr`): an RLQS
            // stream's Envoy, which takes over its own shares when it comes back. Not
            // on every call: an extension is an allocation.
            if peer.is_some()
                && request
                    .uri()
                    .path()
                    .starts_with(crate::api::rlqs::PATH_PREFIX)
            {
                request.extensions_mut().insert(TcpConnectInfo {
                    local_addr: None,
                    remote_addr: peer,
                });
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
