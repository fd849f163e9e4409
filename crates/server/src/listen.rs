//! Serving a router on a listener: HTTP/1 and HTTP/2 (gRPC) on one accept loop, a
//! header read timeout so a slow client cannot hold a connection open for free, and a
//! graceful shutdown that stops accepting and lets requests in flight finish.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

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
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header_read);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(30));
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
        let conn = builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()))
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
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
