//! Serving a router on a listener: HTTP/1 and HTTP/2 (gRPC) on one accept loop, over
//! TLS when asked (`tls.rs`), a timeout on each of the first byte, the TLS handshake
//! and the headers so a slow client cannot hold a connection open for free, and a
//! graceful shutdown that stops accepting and lets requests in flight finish.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
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
    /// The listener's name in metrics and logs.
    pub name: &'static str,
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
        name,
    };
    let timeouts = Timeouts {
        header_read: Duration::from_secs(5),
        drain: Duration::from_millis(100),
    };
    tokio::spawn(serve(listener, app, shutdown, timeouts, Some(tls)));
    Ok(())
}

/// Streams one HTTP/2 connection may have open at once.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;

/// Timeouts of one listener.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// How long a client may take to send a request's headers.
    pub header_read: Duration,
    /// How long requests in flight may take to finish after shutdown begins.
    pub drain: Duration,
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then drains.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
    timeouts: Timeouts,
    tls: Option<ListenerTls>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header_read);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30))
        // The least HTTP/2 asks a server to allow; Envoy opens another connection when
        // a pool's streams are all in use. A stalled stream is ended by the gRPC
        // router's deadline, so one client cannot hold them for ever.
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    let graceful = GracefulShutdown::new();

    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before accept:
                    // back off a little instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let (builder, app, watcher) = (builder.clone(), app.clone(), graceful.watcher());
        let tls = tls.clone();
        tokio::spawn(async move {
            // hyper's header timeout starts with the first bytes (after it has sniffed
            // HTTP/1 or 2): a client that connects and sends nothing gets the same time
            // to send its first byte, then is closed.
            let mut first = [0u8; 1];
            if tokio::time::timeout(timeouts.header_read, stream.peek(&mut first))
                .await
                .is_err()
            {
                tracing::debug!("connection closed: nothing sent within the header timeout");
                return;
            }
            let Some(tls) = tls else {
                let conn = builder
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
                    .into_owned();
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            };
            let handshake = tls.certs.acceptor(tls.strict).accept(stream);
            let stream = match tokio::time::timeout(timeouts.header_read, handshake).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    let reason = crate::tls::failure_reason(&e);
                    metrics::tls_handshake_failure(tls.name, reason);
                    tracing::debug!(listener = tls.name, reason, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    metrics::tls_handshake_failure(tls.name, "timeout");
                    tracing::debug!(listener = tls.name, "TLS handshake timed out");
                    return;
                }
            };
            // Over mutual TLS, each request says whether its client presented a
            // certificate (the routers let one without reach the health probes only).
            let presented = ClientCert(stream.get_ref().1.peer_certificates().is_some());
            let mutual = tls.certs.mutual();
            let service = tower::service_fn(move |mut request: axum::extract::Request<_>| {
                if mutual {
                    request.extensions_mut().insert(presented);
                }
                app.clone().oneshot(request)
            });
            let conn = builder
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(timeouts.drain) => {
            tracing::warn!(after = ?timeouts.drain, "requests still in flight at the end of the drain");
        }
    }
}
