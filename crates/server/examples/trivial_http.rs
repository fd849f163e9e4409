//! A trivial HTTP endpoint on the same accept loop as the service: answers every POST
//! with 200 `{}`. Point `spillway bench --server http://127.0.0.1:9999 --domain x` at it
//! to measure the ceiling of the HTTP path on this machine.
//!
//! ```text
//! cargo run --release -p spillway-server --example trivial_http -- 127.0.0.1:9999
//! ```

use std::time::Duration;

use spillway_server::listen::{Timeouts, serve};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9999".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let app = axum::Router::new().fallback(axum::routing::post(|| async { "{}" }));
    let timeouts = Timeouts {
        header_read: Duration::from_secs(5),
        drain: Duration::from_secs(1),
    };
    println!("trivial endpoint on http://{}", listener.local_addr()?);
    serve(listener, app, CancellationToken::new(), timeouts, None).await;
    Ok(())
}
