//! The service's edges, one file per API, each converting its wire format to the
//! service's [`CheckRequest`](crate::CheckRequest) and back:
//!
//! | file | API |
//! |---|---|
//! | `grpc.rs` | Envoy's `ShouldRateLimit` (and gRPC health), on the gRPC port |
//! | `v1.rs` | Spillway's `POST /v1/check` |
//! | `reference.rs` | the reference's `POST /json` (the protobuf JSON mapping) |
//! | `wire.rs` | Envoy's protobuf messages ↔ the service's types (gRPC and `/json`) |
//! | `headers.rs` | which rate limit headers an answer carries |
//! | `ops.rs` | `/metrics`, `/healthz`, `/readyz`, `/healthcheck`, `/v1/config`, `/v1/top` |
//! | `openapi.rs` (+ `openapi.json`) | `/openapi.json`, the HTTP API's document, and docs/reference/api.md |
//! | `ui.rs` (+ `ui/`) | `/ui`, the console page: its HTML, script and stylesheet, embedded |
//! | `router.rs` | the HTTP routes, and the body read every HTTP request passes first |
//! | `respond.rs` | every status code: answers, errors, refused requests |

pub mod grpc;
pub mod headers;
mod limits;
mod metadata;
pub mod openapi;
mod ops;
mod reference;
mod respond;
pub mod rlqs;
pub mod router;
mod ui;
mod v1;
mod wire;

/// Each API's request bytes to a [`CheckRequest`](crate::CheckRequest), as its endpoint
/// decodes them before deciding, and an RLQS usage report to the state's terms
/// (public for the fuzz targets in `fuzz/`). A decoded
/// request is not yet checked against the service's bounds;
/// [`CheckRequest::validate`](crate::CheckRequest::validate) does that, as
/// `Service::check` does first.
pub mod decode {
    pub use crate::api::grpc::decode as grpc;
    pub use crate::api::reference::decode_request as reference_json;
    pub use crate::api::rlqs::read as rlqs_report;
    pub use crate::api::v1::decode as v1_check;
}
