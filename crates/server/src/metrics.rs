//! Every metric the service exports, named in one place. Labels come from the
//! configuration (domain, rule path) or from fixed sets, never from request values, so
//! a flood of distinct keys cannot grow the exposition.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Label, counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use spillway_core::{Breaker, BreakerState};
use spillway_policy::Rule;

mod reference;
pub use reference::{METRICS, Metric, reference_page};

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
            .set_buckets_for_metric(
                Matcher::Full("spillway_wait_seconds".into()),
                &STORE_BUCKETS,
            )
            .expect("the bucket list is not empty")
            .set_buckets_for_metric(
                Matcher::Full("spillway_rlqs_share_ratio".into()),
                &SHARE_BUCKETS,
            )
            .expect("the bucket list is not empty")
            // The reference's timers, as statsd_exporter's histograms (Prometheus'
            // default buckets, in seconds).
            .set_buckets_for_metric(
                Matcher::Prefix("ratelimit".into()),
                &[
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ],
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

/// A request arrived on `api` (`grpc`, `http`, `json`, `reserve`, `commit`, `release`,
/// `renew`). Counted
/// on every request: each API's counter is registered once and kept (an atomic add, not
/// a lookup of the recorder's registry by name and label).
pub fn request(api: &'static str) {
    const APIS: [&str; 7] = [
        "grpc", "http", "json", "reserve", "commit", "release", "renew",
    ];
    static COUNTERS: [OnceLock<metrics::Counter>; 7] = [const { OnceLock::new() }; 7];
    let register = |api| counter!("spillway_requests_total", "api" => api);
    match APIS.iter().position(|a| *a == api) {
        Some(i) => COUNTERS[i].get_or_init(|| register(APIS[i])).increment(1),
        None => register(api).increment(1),
    }
}

/// A request was refused as invalid before any store call.
pub fn invalid_request(api: &'static str) {
    counter!("spillway_invalid_requests_total", "api" => api).increment(1);
}

/// A request named a domain no policy file defines.
pub fn domain_not_found() {
    counter!("spillway_domain_not_found_total").increment(1);
}

/// What a rule decided: `spillway_decisions_total`'s `outcome`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    OverLimit,
    /// A shadow rule would have refused it.
    ShadowOverLimit,
}

/// One rule's decision. A rule is labelled by its config path (`rule`) and, among the
/// limits of one node, by its name or position as its counter key has it (`limit`:
/// `#burst`, `#1`; empty for a reference rule, the only one of its node).
pub fn decision(domain: &Arc<str>, rule: &Rule, outcome: Outcome) {
    let counters = &rule.counters;
    let (handle, label) = match outcome {
        Outcome::Ok => (&counters.ok, "ok"),
        Outcome::OverLimit => (&counters.over_limit, "over_limit"),
        Outcome::ShadowOverLimit => (&counters.shadow_over_limit, "shadow_over_limit"),
    };
    handle
        .get_or_register(|| {
            let mut labels = rule_labels(domain, rule);
            labels.push(Label::new("outcome", label));
            counter!("spillway_decisions_total", labels)
        })
        .increment(1);
}

/// A `shares` rule's decision for `member` (its priority's digit, then its child):
/// admitted at once within the child's guarantee or by borrowing, after a wait (only
/// a borrower waits), or refused, per child and priority (both bounded by the policy:
/// at most 65 children and 9 priorities a rule).
pub fn share(domain: &Arc<str>, rule: &Rule, member: &str, d: &spillway_core::Decision) {
    let (child, priority) = rule.share_of_member(member);
    let outcome = match (d.allowed(), d.wait.is_zero(), d.borrowed) {
        (true, true, false) => "guaranteed",
        (true, true, true) => "borrowed",
        (true, false, _) => "waited",
        (false, _, _) => "refused",
    };
    let mut labels = rule_labels(domain, rule);
    labels.push(Label::new("child", child.to_owned()));
    labels.push(Label::new("priority", priority.unwrap_or("").to_owned()));
    labels.push(Label::new("outcome", outcome));
    counter!("spillway_shares_decisions_total", labels).increment(1);
}

/// A request that would have waited on `api` was refused: `max_waiters` answers were
/// held already.
pub fn wait_refused(api: &'static str) {
    counter!("spillway_waits_refused_total", "api" => api).increment(1);
}

/// An answer held for its wait on `api`, counted in `spillway_waiters` from its
/// making to its drop (the wait's end, or the caller gone).
#[derive(Debug)]
pub struct Waiting(&'static str);

impl Waiting {
    pub fn new(api: &'static str) -> Waiting {
        gauge!("spillway_waiters", "api" => api).increment(1.0);
        Waiting(api)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        gauge!("spillway_waiters", "api" => self.0).decrement(1.0);
    }
}

/// A hold of a `concurrency` rule was given back (a release, not a decision).
pub fn released(domain: &Arc<str>, rule: &Rule) {
    rule.counters
        .released
        .get_or_register(|| counter!("spillway_holds_released_total", rule_labels(domain, rule)))
        .increment(1);
}

/// A check that may have taken holds gave them back: `cancelled` (its call was
/// dropped during the store call: the caller went away or its deadline passed) or
/// `store_failed` (a timed-out take may have committed).
pub fn takes_given_back(reason: &'static str) {
    counter!("spillway_takes_given_back_total", "reason" => reason).increment(1);
}

/// `holds` of a `concurrency` rule were found lapsed: their holders never gave them
/// back.
pub fn lapsed(domain: &Arc<str>, rule: &Rule, holds: u64) {
    rule.counters
        .lapsed
        .get_or_register(|| counter!("spillway_holds_lapsed_total", rule_labels(domain, rule)))
        .increment(holds);
}

/// A budget alert of `domain`: reached (and queued), sent, dropped (the queue was
/// full) or failed (given up after its tries).
pub fn alert(domain: &str, outcome: &'static str) {
    counter!("spillway_budget_alerts_total", "domain" => domain.to_owned(), "outcome" => outcome)
        .increment(1);
}

/// The holds in use on a `concurrency` rule's keys (`spillway_holds_in_use`).
pub fn holds_in_use(domain: &Arc<str>, rule: &Rule, holds: u64) {
    gauge!("spillway_holds_in_use", rule_labels(domain, rule)).set(holds as f64);
}

/// RLQS streams open now.
pub fn rlqs_streams(n: usize) {
    gauge!("spillway_rlqs_streams").set(n as f64);
}

/// RLQS buckets held now (a bucket is its domain and pairs, whoever reports it).
pub fn rlqs_buckets(n: usize) {
    gauge!("spillway_rlqs_buckets").set(n as f64);
}

/// An RLQS usage report arrived.
pub fn rlqs_report() {
    counter!("spillway_rlqs_reports_total").increment(1);
}

/// `n` RLQS bucket assignments were sent.
pub fn rlqs_assignments(n: usize) {
    counter!("spillway_rlqs_assignments_total").increment(n as u64);
}

/// An RLQS bucket was abandoned (idle past `rlqs_abandon_after`).
pub fn rlqs_abandoned() {
    counter!("spillway_rlqs_abandoned_total").increment(1);
}

/// The RLQS share ratio histogram's buckets: an even split among 2, 3, 4, 5, 10, 20
/// and 100 Envoys, and the whole rate.
const SHARE_BUCKETS: [f64; 9] = [0.01, 0.05, 0.1, 0.2, 0.25, 0.34, 0.5, 0.9, 1.0];

/// Where the shares of `domain`'s RLQS buckets are recorded, each Envoy's as a ratio of
/// its bucket's rate at each of its reports: a handle a stream keeps, not a registry
/// lookup and a label's allocation per bucket per report.
pub fn rlqs_share_ratio(domain: &str) -> metrics::Histogram {
    histogram!("spillway_rlqs_share_ratio", "domain" => domain.to_owned())
}

/// A reported RLQS bucket got no assignment: `reason` says why.
pub fn rlqs_refused(reason: &'static str) {
    counter!("spillway_rlqs_refused_buckets_total", "reason" => reason).increment(1);
}

/// An RLQS stream was refused: `rlqs_max_streams` were open.
pub fn rlqs_refused_stream() {
    counter!("spillway_rlqs_refused_streams_total").increment(1);
}

/// A rule admitted a request and is past its near-limit ratio.
pub fn near_limit(domain: &Arc<str>, rule: &Rule) {
    rule.counters
        .near_limit
        .get_or_register(|| counter!("spillway_near_limit_total", rule_labels(domain, rule)))
        .increment(1);
}

/// The labels of a rule's counters (registered once, then kept with the rule).
fn rule_labels(domain: &Arc<str>, rule: &Rule) -> Vec<Label> {
    vec![
        Label::new("domain", Arc::clone(domain)),
        Label::new("rule", Arc::clone(&rule.metric)),
        Label::new("limit", Arc::clone(&rule.slot)),
    ]
}

/// A request admitted after a wait of `d` (a rule's `max_wait`), answered on `api`
/// (`grpc`, `json`: held for the wait; `http`: waited by the server, or by the caller).
pub fn waited(api: &'static str, d: Duration) {
    histogram!("spillway_wait_seconds", "api" => api).record(d.as_secs_f64());
}

/// How long one store call took.
pub fn store_latency(d: Duration) {
    histogram!("spillway_store_duration_seconds").record(d.as_secs_f64());
}

/// A call to the store `store` (`main`, `per_second`) failed (`timeout`, `error`) or
/// was not made (`breaker_open`).
pub fn store_error(store: &'static str, kind: &'static str) {
    counter!("spillway_store_errors_total", "store" => store, "kind" => kind).increment(1);
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

/// The breaker of the store `store` (`main`, `per_second`): 0 closed, 1 open, 2
/// half-open.
pub fn breaker(store: &'static str, breaker: &Breaker) {
    counter!("spillway_breaker_opened_total", "store" => store).absolute(breaker.opened());
    let value = match breaker.state() {
        BreakerState::Closed => 0.0,
        BreakerState::Open => 1.0,
        BreakerState::HalfOpen => 2.0,
    };
    gauge!("spillway_breaker_state", "store" => store).set(value);
}

/// How many overrides this replica applies now (`limits.rs`).
pub fn overrides(n: usize) {
    gauge!("spillway_overrides").set(n as f64);
}

/// An override changed through this replica's admin API (`put` or `delete`).
pub fn override_change(op: &'static str) {
    counter!("spillway_override_changes_total", "op" => op).increment(1);
}

/// A poll for overrides changed elsewhere failed (the store did not answer).
pub fn override_sync_failed() {
    counter!("spillway_override_sync_failures_total").increment(1);
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

/// A gRPC call not done within its deadline (answered `DEADLINE_EXCEEDED`).
pub fn grpc_deadline_exceeded() {
    counter!("spillway_grpc_deadline_exceeded_total").increment(1);
}

/// A connection on `listener` was accepted (and is now open).
pub fn connection_opened(listener: &'static str) {
    gauge!("spillway_connections", "listener" => listener).increment(1.0);
}

/// A connection on `listener` closed.
pub fn connection_closed(listener: &'static str) {
    gauge!("spillway_connections", "listener" => listener).decrement(1.0);
}

/// A connection on `listener` was closed as soon as it was accepted: the listener had
/// `max_connections` open.
pub fn connection_refused(listener: &'static str) {
    counter!("spillway_connections_refused_total", "listener" => listener).increment(1);
}

/// A connection on `listener` was closed after `idle_timeout` with no request.
pub fn connection_idle_closed(listener: &'static str) {
    counter!("spillway_connections_idle_closed_total", "listener" => listener).increment(1);
}

/// A connection on `listener` reached its maximum age and was asked to go away.
pub fn connection_aged_out(listener: &'static str) {
    counter!("spillway_connections_aged_out_total", "listener" => listener).increment(1);
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
