//! The service's ceilings on the same accept loop as the service, answering without
//! deciding: 200 to every POST on HTTP, OK to every `ShouldRateLimit` on gRPC. Point
//! `spillway bench --server http://127.0.0.1:9999 --domain x` (or `grpc://…:9998`,
//! with `--server-pid`) at them to measure what this machine's HTTP and gRPC cost
//! before anything is decided.
//!
//! ```text
//! cargo run --release -p spillway-server --example trivial -- 127.0.0.1:9999 127.0.0.1:9998
//! ```

use std::time::Duration;

use spillway_server::listen::{Limits, serve};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let http = args.next().unwrap_or_else(|| "127.0.0.1:9999".into());
    let grpc = args.next().unwrap_or_else(|| "127.0.0.1:9998".into());
    let timeouts = Limits {
        drain: Duration::from_secs(1),
        ..Limits::new("trivial")
    };
    let (http, grpc) = (
        tokio::net::TcpListener::bind(&http).await?,
        tokio::net::TcpListener::bind(&grpc).await?,
    );
    println!(
        "trivial endpoints on http://{} and grpc://{}",
        http.local_addr()?,
        grpc.local_addr()?
    );
    let stop = CancellationToken::new();
    tokio::join!(
        serve(
            http,
            spillway_server::ceiling::http(),
            stop.clone(),
            timeouts,
            None
        ),
        serve(grpc, spillway_server::ceiling::grpc(), stop, timeouts, None),
    );
    Ok(())
}
