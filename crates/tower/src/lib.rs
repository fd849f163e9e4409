//! Spillway as a tower layer: rate limiting inside an axum, tonic or hyper service,
//! on the in-process [`MemoryStore`](spillway_core::MemoryStore) or shared by every
//! replica through Redis (`spillway_redis::RedisStore`).
//!
//! - **Several limits per request**, decided all or nothing in one store round: a
//!   request is charged by every limit or by none.
//! - **Keys** from the client IP (trusted proxies only, IPv6 grouped by prefix), a
//!   header, an extension set by your auth layer, the method and route, or a closure;
//!   a request without a key gets a 400 or a fallback key.
//! - **Denials**: 429 with `Retry-After` and the IETF `RateLimit-Policy` / `RateLimit`
//!   headers (or the older forms); gRPC requests get `RESOURCE_EXHAUSTED` with a
//!   `RetryInfo` detail. Or a shadow ban (your handler answers, the service is not
//!   called), or shadow mode (everything goes through; denials are only recorded).
//! - **Store failures** follow a policy — open, closed (503) or local — behind a
//!   timeout and a circuit breaker.
//! - **Clones share state**: cloning the layer or a service never multiplies a limit.
//! - **Cheap on the hot path**: on the memory store a request is decided in `call()`
//!   (no boxed future, no timer), and admitted responses keep the inner service's body
//!   type ([`LayerBody`]: axum's, tonic's, `Full`, `BoxBody`, `String`; wrap any other
//!   in [`ResponseBody`]).
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{Router, body::Body, routing::get};
//! use http::{Request, StatusCode};
//! use spillway_core::{Algorithm, Limit, ManualClock, MemoryStore, Timestamp};
//! use spillway_tower::{KeyExtractor, RateLimitLayer, Rule};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
//! let per_key = Limit::new(Algorithm::Gcra, 2, Duration::from_secs(1))?;
//! let layer = RateLimitLayer::builder(MemoryStore::new())
//!     .clock(clock.clone())
//!     .limit(Rule::new("per-key", per_key, KeyExtractor::header("x-api-key")))
//!     .build()?;
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//!
//! let call = || {
//!     let request = Request::get("/").header("x-api-key", "k1").body(Body::empty());
//!     app.clone().oneshot(request.unwrap())
//! };
//! assert_eq!(call().await?.status(), StatusCode::OK);
//! assert_eq!(call().await?.status(), StatusCode::OK);
//! let denied = call().await?;
//! assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(denied.headers()["retry-after"], "1");
//! assert_eq!(denied.headers()["ratelimit"], r#""per-key";r=0;t=1"#);
//!
//! clock.advance(Duration::from_millis(500));
//! assert_eq!(call().await?.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```
//!
//! The layer waits for the store with `tokio::time::timeout`: it runs inside a Tokio
//! runtime with the time driver on (as `#[tokio::main]`, axum and tonic have it).
//!
//! On Redis Cluster one atomic decision must stay in one slot: limits keyed by
//! different values (an IP and an API key) land in different slots, and the store
//! refuses the batch. Give such layers a single limit each, or run them on
//! standalone Redis or Sentinel.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod body;
mod client_ip;
mod error;
mod future;
mod hold;
mod key;
mod layer;
mod respond;
mod service;
mod shared;

pub use body::{LayerBody, ResponseBody};
pub use client_ip::{ClientIp, Forwarding};
pub use error::{Error, Rejection};
pub use future::ResponseFuture;
pub use hold::{HoldSlot, Holding};
pub use key::KeyExtractor;
pub use layer::{DEFAULT_TIMEOUT, MissingKey, RateLimitLayer, RateLimitLayerBuilder, Rule};
pub use service::RateLimit;
pub use spillway_core::headers::HeaderStyle;
pub use spillway_core::{Mode, OnStoreError};
