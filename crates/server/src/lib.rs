//! The Spillway service: Envoy's gRPC rate limit protocol and an HTTP/JSON API over the
//! policies of `spillway-policy` and a store (memory, or Redis), with failure policies,
//! a circuit breaker, hot reload, Prometheus metrics and graceful shutdown.
//!
//! A request, end to end:
//!
//! ```text
//! api/grpc.rs      (ShouldRateLimit) ┐                     ┌ store.rs: core's GuardedStore
//! api/v1.rs        (/v1/check)       ├> service.rs: match ─┤   over memory | Redis
//! api/reference.rs (/json)           ┘   rules, decide,    └ metrics.rs
//!                                        aggregate
//! ```
//!
//! A start, top to bottom: `config.rs` turns the sources into one [`Config`];
//! `app.rs` builds the [`App`] from it (policies, certificates, store, state), binds its
//! listeners and serves them (`listen.rs`, over TLS from `tls.rs` when asked), with the
//! rules' source (`reload.rs` watches files, `xds.rs` follows an ADS server) and the
//! upkeep tasks. `history.rs` keeps the last minutes of the decision counters for the
//! console's charts; `top.rs` the heaviest denied keys.
//!
//! Imports go one way; `config` imports nothing of this crate (a test,
//! `imports_go_one_way`, checks both):
//!
//! ```text
//! app ─┬─> api ─┬─> state ─┬─> service ─┬─> store ─> metrics
//!      │        │          ├─> history  └─> top
//!      │        │          └─> config
//!      ├─> xds ─┴─> reload ─> tls ─> config
//!      └─> listen ─> tls
//! ```

#![forbid(unsafe_code)]
// The decision future nests the Redis client's futures inside tokio::join!; its layout
// needs more than the default query depth.
#![recursion_limit = "256"]

pub mod alerts;
mod api;
mod app;
#[doc(hidden)]
pub mod ceiling;
pub mod config;
mod history;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod otel;
mod reload;
pub mod rlqs;
mod service;
mod state;
pub mod stats;
mod store;
pub mod tls;
mod top;
pub mod xds;

pub use api::decode;
pub use api::openapi;
pub use api::router::{admin_app, http_app};
pub use app::{App, AppBuilder, Listeners, Running, StartError};
pub use config::{Config, ConfigError};
pub use service::request::{
    CheckRequest, CheckResponse, Code, Descriptor, MAX_DESCRIPTORS, MAX_DOMAIN_LEN, MAX_ENTRIES,
    MAX_ENTRY_KEY_LEN, Override, ReportedRule, Status, Valid,
};
pub use service::{
    CheckError, DeniedBy, DescriptorExplanation, Explanation, LimitExplanation, LimitState,
    Options, PathStep, Service,
};
pub use spillway_core::headers::HeaderStyle;
pub use spillway_core::{Breaker, BreakerState};
pub use state::{AppState, LoadStatus};
pub use store::{AnyStore, Stores};
pub use top::{Heavy, RuleTop};

#[cfg(test)]
mod imports;
