//! Every metric the service exports, named in one place. Labels come from the
//! configuration (domain, rule path) or from fixed sets, never from request values, so
//! a flood of distinct keys cannot grow the exposition.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use spillway_core::BreakerState;
use spillway_policy::Rule;

const STORE_BUCKETS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
    5.0,
];

/// The process-wide Prometheus recorder (the `metrics` facade has one global recorder,
/// so every server in a process shares it).
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("spillway_store_duration_seconds".into()),
                &STORE_BUCKETS,
            )
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder may already be installed (an embedding application's); then
        // our handle renders only what it records, which is nothing, but nothing fails.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}

/// A request arrived on `api` (`grpc`, `http`, `json`).
pub fn request(api: &'static str) {
    counter!("spillway_requests_total", "api" => api).increment(1);
}

/// A request was refused as invalid before any store call.
pub fn invalid_request(api: &'static str) {
    counter!("spillway_invalid_requests_total", "api" => api).increment(1);
}

/// A request named a domain no policy file defines.
pub fn domain_not_found() {
    counter!("spillway_domain_not_found_total").increment(1);
}

/// One rule's decision: `outcome` is `ok`, `over_limit` or `shadow_over_limit`. A rule
/// is labelled by its config path (`rule`) and, among the limits of one node, by its
/// name or position as its counter key has it (`limit`: `#burst`, `#1`; empty for a
/// reference rule, the only one of its node).
pub fn decision(domain: &Arc<str>, rule: &Rule, outcome: &'static str) {
    counter!(
        "spillway_decisions_total",
        "domain" => Arc::clone(domain),
        "rule" => Arc::clone(&rule.metric),
        "limit" => Arc::clone(&rule.slot),
        "outcome" => outcome
    )
    .increment(1);
}

/// A rule admitted a request and is past its near-limit ratio.
pub fn near_limit(domain: &Arc<str>, rule: &Rule) {
    counter!(
        "spillway_near_limit_total",
        "domain" => Arc::clone(domain),
        "rule" => Arc::clone(&rule.metric),
        "limit" => Arc::clone(&rule.slot)
    )
    .increment(1);
}

/// How long one store call took.
pub fn store_latency(d: Duration) {
    histogram!("spillway_store_duration_seconds").record(d.as_secs_f64());
}

/// A store call failed (`timeout`, `error`) or was not made (`breaker_open`).
pub fn store_error(kind: &'static str) {
    counter!("spillway_store_errors_total", "kind" => kind).increment(1);
}

/// A failure policy decided instead of the store (`open`, `closed`, `local`).
pub fn fallback(policy: &'static str) {
    counter!("spillway_fallback_decisions_total", "policy" => policy).increment(1);
}

/// A decision answered from the deny cache, without a store call.
pub fn deny_cache_hit() {
    counter!("spillway_deny_cache_hits_total").increment(1);
}

/// A decision answered from this server's share of a limit (a lease or sync count).
pub fn share_hit() {
    counter!("spillway_share_decisions_total").increment(1);
}

/// The breaker's state: 0 closed, 1 open, 2 half-open.
pub fn breaker(state: BreakerState) {
    let value = match state {
        BreakerState::Closed => 0.0,
        BreakerState::Open => 1.0,
        BreakerState::HalfOpen => 2.0,
    };
    gauge!("spillway_breaker_state").set(value);
}

/// A configuration (re)load: `success` or `error`.
pub fn config_load(ok: bool, domains: usize) {
    let result = if ok { "success" } else { "error" };
    counter!("spillway_config_loads_total", "result" => result).increment(1);
    gauge!("spillway_config_last_load_ok").set(if ok { 1.0 } else { 0.0 });
    if ok {
        gauge!("spillway_config_domains").set(domains as f64);
    }
}

/// `n` decisions of a candidate rule (`--candidate-config`), answering nobody.
pub fn candidate_decision(domain: &Arc<str>, rule: &Rule, outcome: &'static str, n: u64) {
    counter!(
        "spillway_candidate_decisions_total",
        "domain" => Arc::clone(domain),
        "rule" => Arc::clone(&rule.metric),
        "limit" => Arc::clone(&rule.slot),
        "outcome" => outcome
    )
    .increment(n);
}

/// The candidate would have answered otherwise: `would_deny` (live admitted) or
/// `would_admit` (live denied).
pub fn candidate_disagreement(domain: &Arc<str>, kind: &'static str, n: u64) {
    counter!(
        "spillway_candidate_disagreements_total",
        "domain" => Arc::clone(domain),
        "kind" => kind
    )
    .increment(n);
}

/// A candidate evaluation not run: too many were in flight.
pub fn candidate_dropped() {
    counter!("spillway_candidate_dropped_total").increment(1);
}

/// A candidate evaluation's store call failed (nothing else is affected).
pub fn candidate_error() {
    counter!("spillway_candidate_errors_total").increment(1);
}

/// A reload of the served TLS certificates: `success` or `error` (the old ones stay).
pub fn tls_reload(ok: bool) {
    let result = if ok { "success" } else { "error" };
    counter!("spillway_tls_reloads_total", "result" => result).increment(1);
}

/// When the served certificate expires (Unix seconds): alert well before it.
pub fn tls_not_after(unix_secs: i64) {
    gauge!("spillway_tls_certificate_not_after_seconds").set(unix_secs as f64);
}

/// A TLS handshake on `listener` (`grpc`, `http`, `admin`) that failed or timed out;
/// `reason` is one of a fixed set (`timeout`, `not_tls`, `no_client_certificate`, ...).
pub fn tls_handshake_failure(listener: &'static str, reason: &'static str) {
    counter!(
        "spillway_tls_handshake_failures_total",
        "listener" => listener,
        "reason" => reason
    )
    .increment(1);
}

/// One metric, as `docs/reference/metrics.md` lists it.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// Each label and its values.
    pub labels: &'static str,
    pub help: &'static str,
    /// The reference's statsd names it replaces (`<domain>`, `<path>` as the reference
    /// writes them), for people migrating.
    pub replaces: &'static str,
}

const fn metric(
    name: &'static str,
    kind: &'static str,
    labels: &'static str,
    help: &'static str,
    replaces: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        labels,
        help,
        replaces,
    }
}

const RULE: &str = "`domain`; `rule` (the rule's config path, levels joined by `.`, `key_value` or `key`, as the reference's `<KEY_PATH>`; `override` for a request's own limit); `limit` (`#name` or `#position` among a node's limits; empty for a reference rule)";

/// Every metric the service exports, and the tower layer's (which it records in the
/// embedding application's own recorder).
pub static METRICS: &[Metric] = &[
    metric(
        "spillway_requests_total",
        "counter",
        "`api`: `grpc`, `http` (/v1/check), `json` (/json), `explain`",
        "requests received, valid or not",
        "`ratelimit_server.ShouldRateLimit.total_requests`",
    ),
    metric(
        "spillway_invalid_requests_total",
        "counter",
        "`api`: as above",
        "requests refused as invalid before any store call (400 / INVALID_ARGUMENT)",
        "`ratelimit.service.call.should_rate_limit.service_error` (in part)",
    ),
    metric(
        "spillway_domain_not_found_total",
        "counter",
        "—",
        "requests naming a domain no policy defines (answered OK, as the reference does)",
        "`ratelimit.service.rate_limit.<domain>.domain_not_found`",
    ),
    metric(
        "spillway_decisions_total",
        "counter",
        "as `rule` below, and `outcome`: `ok`, `over_limit`, `shadow_over_limit`",
        "one rule's decision for one request",
        "`ratelimit.service.rate_limit.<domain>.<path>.total_hits` (the sum), `.within_limit` (`ok`), `.over_limit` (`over_limit`), `.shadow_mode` (`shadow_over_limit`)",
    ),
    metric(
        "spillway_near_limit_total",
        "counter",
        "as `rule` below",
        "admitted requests past the rule's near_limit_ratio of its limit",
        "`ratelimit.service.rate_limit.<domain>.<path>.near_limit`",
    ),
    metric(
        "spillway_store_duration_seconds",
        "histogram",
        "—",
        "how long each store call took (buckets 50 µs to 5 s)",
        "`ratelimit_server.ShouldRateLimit.response_time` (the store's part)",
    ),
    metric(
        "spillway_store_errors_total",
        "counter",
        "`kind`: `timeout`, `error`, `breaker_open` (no call made)",
        "store calls that failed, or were not made because the breaker is open",
        "`ratelimit.service.call.should_rate_limit.redis_error`",
    ),
    metric(
        "spillway_fallback_decisions_total",
        "counter",
        "`policy`: `open`, `closed`, `local`",
        "decisions a failure policy made instead of the store",
        "—",
    ),
    metric(
        "spillway_deny_cache_hits_total",
        "counter",
        "—",
        "decisions answered from the deny cache without a store call",
        "`ratelimit.service.rate_limit.<domain>.<path>.over_limit_with_local_cache`, `ratelimit.localcache.hitCount`",
    ),
    metric(
        "spillway_share_decisions_total",
        "counter",
        "—",
        "decisions answered from this server's share of a `lease` or `sync` limit",
        "—",
    ),
    metric(
        "spillway_breaker_state",
        "gauge",
        "— (value: `0` closed, `1` open, `2` half-open)",
        "the store's circuit breaker",
        "—",
    ),
    metric(
        "spillway_config_loads_total",
        "counter",
        "`result`: `success`, `error`",
        "policy loads, the first at startup included (files or xDS)",
        "`ratelimit.service.config_load_success`, `ratelimit.service.config_load_error`",
    ),
    metric(
        "spillway_config_last_load_ok",
        "gauge",
        "— (value: `1` or `0`)",
        "whether the last load succeeded (a failed one keeps the rules in force)",
        "—",
    ),
    metric(
        "spillway_config_domains",
        "gauge",
        "—",
        "domains in force",
        "—",
    ),
    metric(
        "spillway_candidate_decisions_total",
        "counter",
        "as `spillway_decisions_total`",
        "decisions of the candidate policies (--candidate-config), answering nobody",
        "—",
    ),
    metric(
        "spillway_candidate_disagreements_total",
        "counter",
        "`domain`; `kind`: `would_deny` (live admitted), `would_admit` (live denied)",
        "requests the candidate would have answered otherwise",
        "—",
    ),
    metric(
        "spillway_candidate_dropped_total",
        "counter",
        "—",
        "requests the candidate had no room for (its queue was full)",
        "—",
    ),
    metric(
        "spillway_candidate_errors_total",
        "counter",
        "—",
        "candidate store calls that failed (nothing else is affected)",
        "—",
    ),
    metric(
        "spillway_tls_reloads_total",
        "counter",
        "`result`: `success`, `error`",
        "reloads of the served certificates (a failed one keeps the old pair)",
        "—",
    ),
    metric(
        "spillway_tls_certificate_not_after_seconds",
        "gauge",
        "—",
        "when the served certificate expires (Unix seconds)",
        "—",
    ),
    metric(
        "spillway_tls_handshake_failures_total",
        "counter",
        "`listener`: `grpc`, `http`, `admin`; `reason`: `timeout`, `closed`, `io`, `not_tls`, `no_client_certificate`, `bad_client_certificate`, `incompatible`, `alert_received`, `other`",
        "TLS handshakes that failed or timed out",
        "—",
    ),
    metric(
        "spillway_tower_requests_total",
        "counter",
        "`outcome`: `allowed`, `limited`, `shadow_limited`, `shadow_banned`, `missing_key`",
        "the tower layer: requests it decided",
        "—",
    ),
    metric(
        "spillway_tower_denials_total",
        "counter",
        "`limit`: the rule's name",
        "the tower layer: denials (shadow ones included) by rule",
        "—",
    ),
    metric(
        "spillway_tower_store_errors_total",
        "counter",
        "`kind`: `timeout`, `error`, `breaker_open`; `policy`: `open`, `closed`, `local`",
        "the tower layer: store calls that failed, and the policy that answered",
        "—",
    ),
    metric(
        "spillway_tower_deny_cache_hits_total",
        "counter",
        "—",
        "the tower layer: decisions answered from the deny cache",
        "—",
    ),
    metric(
        "spillway_tower_share_decisions_total",
        "counter",
        "—",
        "the tower layer: decisions answered from this process's share of a limit",
        "—",
    ),
];

/// `docs/reference/metrics.md`: `spillway config --reference metrics` prints it, and a
/// test fails when the page in the repository differs, or when a metric is recorded
/// that [`METRICS`] does not list.
pub fn reference_page() -> String {
    use std::fmt::Write;
    let mut out = String::from(
        "# Metrics reference\n\n\
         <!-- Generated by `spillway config --reference metrics > docs/reference/metrics.md`;\n     \
         crates/server/tests/reference_pages.rs fails when this page and the code differ. -->\n\n\
         Every metric Spillway exports, in Prometheus' text format at `/metrics` on the HTTP \
         and admin listeners (and on `metrics_addr`, when set). Labels come from the \
         configuration or from the fixed sets below, never from request values, so a flood \
         of distinct keys cannot grow the exposition. The `spillway_tower_*` metrics are the \
         tower layer's, recorded in the embedding application's own recorder.\n\n\
         The last column maps the reference service's statsd names (`ratelimit.service.…`) \
         for dashboards and alerts being moved; `docs/operating.md` has alerts on these names.\n\n\
         Where `rule` appears, the labels are ",
    );
    out.push_str(RULE);
    out.push_str(
        ".\n\n| metric | type | labels | meaning | replaces (reference statsd) |\n|---|---|---|---|---|\n",
    );
    for m in METRICS {
        let labels = m
            .labels
            .replace("as `rule` below", "`domain`, `rule`, `limit`");
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            m.name, m.kind, labels, m.help, m.replaces
        );
    }
    out
}
