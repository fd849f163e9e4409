//! An axum app rate limited by `spillway-tower` on Redis, so every replica of it shares
//! the same limits: per client IP (10 per second, bursts of 20) and per API key
//! (1,000 per day), both checked at once — a request over either is charged by neither.
//! `/health` is not limited.
//!
//! ```text
//! cargo run -p spillway-tower --example axum_app -- redis://127.0.0.1:6379 127.0.0.1:3000
//! curl -i -H 'x-api-key: demo' http://127.0.0.1:3000/hello
//! ```
//!
//! Behind a load balancer, trust it so the client address comes from
//! `X-Forwarded-For`: `ClientIp::new().trust("10.0.0.0/8")`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use spillway_core::{Algorithm, Limit};
use spillway_redis::RedisStore;
use spillway_tower::{ClientIp, KeyExtractor, OnStoreError, RateLimitLayer, Rule};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let redis = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:3000".into())
        .parse()?;

    let store = RedisStore::builder(&redis)
        .prefix("example")
        .build()
        .await?;
    let per_ip = Limit::builder(Algorithm::Gcra, 10, Duration::from_secs(1))
        .burst(20)
        .build()?;
    let per_key = Limit::new(Algorithm::FixedWindow, 1_000, Duration::from_secs(86_400))?;
    let limits = RateLimitLayer::builder(store)
        .limit(Rule::new(
            "per-ip",
            per_ip,
            KeyExtractor::client_ip(ClientIp::new()),
        ))
        .limit(Rule::new(
            "per-key",
            per_key,
            KeyExtractor::header("x-api-key"),
        ))
        // Redis down: keep limiting, per instance, rather than let everything through.
        .on_store_error(OnStoreError::Local)
        .headers_on_allowed(true)
        .build()?;

    let app = Router::new()
        .route("/hello", get(|| async { "hello\n" }))
        .route_layer(limits)
        .route("/health", get(|| async { "ok\n" }));

    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{addr}, limits in {redis}");
    // The peer address is what `ClientIp` reads.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
