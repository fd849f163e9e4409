//! Envoy's Rate Limit Quota Service (RLQS): the state behind
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`
//! (served by `api/rlqs.rs`). Each Envoy opens a stream per domain and reports, every
//! few seconds, how many requests each of its buckets allowed and denied; Spillway
//! answers with each bucket's assignment, a share of the bucket's rule that Envoy runs
//! as a token bucket with no call per request (docs/envoy.md, "Rate Limit Quota
//! Service"; the streams and buckets: `quotas.rs`; the shares: `shares.rs`).

pub mod quotas;
pub mod shares;

pub(crate) use quotas::bucket_pairs;
pub use quotas::{Explanation, Quotas, Settings};
