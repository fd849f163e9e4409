//! Envoy's Rate Limit Quota Service (RLQS): the state behind
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`
//! (whose wire form is `api/rlqs.rs`'s). Each Envoy opens a stream per domain and
//! reports, every few seconds, how many requests each of its buckets allowed and
//! denied; Spillway answers with each bucket's assignment, a share of the bucket's
//! rule that Envoy runs as a token bucket with no call per request (docs/envoy.md,
//! "Rate Limit Quota Service"; the bound the shares keep: docs/algorithms.md).
//!
//! - `buckets.rs`: reports and answers in the state's terms, and a bucket's rule;
//! - `quotas.rs`: the streams and the buckets they hold, what each Envoy runs;
//! - `report.rs`: one report, matched and booked;
//! - `streams.rs`: each stream's answers, one waiting per bucket;
//! - `ledger.rs`: where shares are booked (this process, or Redis), by the rules of
//!   `spillway_core::fair_share`;
//! - `explain.rs`: `/v1/rlqs/explain`.

pub mod buckets;
mod explain;
pub mod ledger;
mod quotas;
mod report;
mod streams;

pub use buckets::{Action, Answer, Pairs, Report, Rulebook, Strategy, Usage, bucket_pairs};
pub use explain::{ExplainedHolder, ExplainedRule, Explanation, WhyUnmatched};
pub use ledger::{Ledger, MemoryLedger, RedisLedger};
pub use quotas::{Quotas, Refusal, Settings, Settling};
pub use streams::DELIVERY_GRACE;
