//! The service's ceilings on the same accept loop as the service, answering without
//! deciding: 200 to every POST on HTTP, OK to every `ShouldRateLimit` on gRPC; and the
//! same gRPC answer from `tonic::transport::Server`, tonic's own server (as Limitador
//! serves Envoy's protocol), to compare the accept loops. Point
//! `spillway bench --server http://127.0.0.1:9999 --domain x` (or `grpc://…:9998`, or
//! tonic's on `grpc://…:9997`, with `--server-pid`) at them to measure what this
//! machine's HTTP and gRPC cost before anything is decided.
//!
//! ```text
//! cargo run --release -p spillway-server --example trivial -- 127.0.0.1:9999 127.0.0.1:9998 127.0.0.1:9997
//! ```

use std::time::Duration;

use spillway_server::listen::{Limits, serve};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let http = args.next().unwrap_or_else(|| "127.0.0.1:9999".into());
    let grpc = args.next().unwrap_or_else(|| "127.0.0.1:9998".into());
    let tonic_addr: std::net::SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:9997".into())
        .parse()
        .expect("a socket address for tonic's server");
    let timeouts = Limits {
        drain: Duration::from_secs(1),
        ..Limits::new("trivial")
    };
    let (http, grpc) = (
        tokio::net::TcpListener::bind(&http).await?,
        tokio::net::TcpListener::bind(&grpc).await?,
    );
    println!(
        "trivial endpoints on http://{} and grpc://{}, tonic's own server on grpc://{tonic_addr}",
        http.local_addr()?,
        grpc.local_addr()?
    );
    let stop = CancellationToken::new();
    let tonic_server = tonic::transport::Server::builder()
        .add_service(spillway_server::ceiling::grpc_service())
        .serve(tonic_addr);
    let (_, _, tonic_result) = tokio::join!(
        serve(
            http,
            spillway_server::ceiling::http(),
            stop.clone(),
            timeouts,
            None
        ),
        serve(grpc, spillway_server::ceiling::grpc(), stop, timeouts, None),
        tonic_server,
    );
    tonic_result.map_err(std::io::Error::other)
}
