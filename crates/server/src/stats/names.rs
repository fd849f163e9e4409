//! The reference's stats that Spillway keeps, declared once (a table): their statsd
//! names and what each counts.

use super::mapper::Kind;
use super::{
    CONFIG_LOAD_ERROR, CONFIG_LOAD_SUCCESS, GLOBAL_SHADOW, REDIS_ERROR, RESPONSE_TIME,
    SERVICE_ERROR, TOTAL_REQUESTS,
};

/// One of the reference's stats Spillway keeps, declared once: `docs/reference/metrics.md`
/// lists each with the Prometheus series the reference's default mapping gives it.
#[derive(Clone, Copy, Debug)]
pub struct ReferenceStat {
    /// Its statsd name, `<domain>` and `<path>` standing for a rule's.
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

const fn stat(name: &'static str, kind: Kind, help: &'static str) -> ReferenceStat {
    ReferenceStat { name, kind, help }
}

/// Every stat of the reference's that Spillway keeps.
pub static REFERENCE_STATS: &[ReferenceStat] = &[
    stat(
        "ratelimit.service.rate_limit.<domain>.<path>.total_hits",
        Kind::Counter,
        "every hit a rule decided (a request's hits_addend, 1 by default; a stream-done charge of 600 is 600)",
    ),
    stat(
        "ratelimit.service.rate_limit.<domain>.<path>.within_limit",
        Kind::Counter,
        "hits admitted",
    ),
    stat(
        "ratelimit.service.rate_limit.<domain>.<path>.near_limit",
        Kind::Counter,
        "hits past near_limit_ratio of the limit and within it",
    ),
    stat(
        "ratelimit.service.rate_limit.<domain>.<path>.over_limit",
        Kind::Counter,
        "hits past the limit (shadow rules' included)",
    ),
    stat(
        "ratelimit.service.rate_limit.<domain>.<path>.shadow_mode",
        Kind::Counter,
        "hits a shadow rule would have refused",
    ),
    stat(
        "ratelimit.service.rate_limit.<domain>.domain_not_found",
        Kind::Counter,
        "descriptors of requests naming a domain no rules define",
    ),
    stat(
        GLOBAL_SHADOW,
        Kind::Counter,
        "requests over a limit answered OK by shadow_mode (the global one)",
    ),
    stat(
        REDIS_ERROR,
        Kind::Counter,
        "gRPC calls that failed because the store did (a rule's on_store_error: closed)",
    ),
    stat(
        SERVICE_ERROR,
        Kind::Counter,
        "gRPC calls refused as invalid",
    ),
    stat(TOTAL_REQUESTS, Kind::Counter, "gRPC calls"),
    stat(
        RESPONSE_TIME,
        Kind::Timer,
        "each gRPC call's time, in ms (Prometheus: seconds)",
    ),
    stat(
        CONFIG_LOAD_SUCCESS,
        Kind::Counter,
        "rule loads that worked, the first at startup included (files; over xDS, each set)",
    ),
    stat(
        CONFIG_LOAD_ERROR,
        Kind::Counter,
        "rule loads refused (the last good rules stay)",
    ),
];
