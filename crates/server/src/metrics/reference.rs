//! Every metric, declared once with its type, labels, meaning and the reference's
//! statsd names it replaces: `docs/reference/metrics.md` is made from this table, and
//! a test fails when a metric is recorded that the table does not list.

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
        "`api`: `grpc`, `http` (/v1/check, /v1/acquire), `release` (/v1/release), `reserve` (/v1/reserve), `commit` (/v1/commit), `json` (/json), `explain`",
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
        "the same events as `ratelimit.service.rate_limit.<domain>.<path>.total_hits`, `.within_limit` (`ok`), `.over_limit` (`over_limit`), `.shadow_mode` (`shadow_over_limit`), counted in decisions where those count hits (a `hits_addend` of 600 is 1 here, 600 there; with `reference_metrics` the reference's own names are served too, below)",
    ),
    metric(
        "spillway_near_limit_total",
        "counter",
        "as `rule` below",
        "admitted requests past the rule's near_limit_ratio of its limit",
        "`ratelimit.service.rate_limit.<domain>.<path>.near_limit`",
    ),
    metric(
        "spillway_shares_decisions_total",
        "counter",
        "as `rule` below, `child` (as the tree names it: `*` for every unlisted value), `priority` (its name; empty without priorities), `outcome`: `guaranteed`, `borrowed`, `waited`, `refused`",
        "a `shares` rule's decisions per child and priority: who the parent admitted at once within the child's guaranteed rate (`guaranteed`) or by borrowing what the other children leave (`borrowed`), after a wait (`waited`: always a borrower; `spillway_wait_seconds` says how long), or refused (shed)",
        "—",
    ),
    metric(
        "spillway_holds_released_total",
        "counter",
        "as `rule` below",
        "holds of a `concurrency` rule given back (`/v1/release`, a descriptor led by `release`: Envoy's stream-done call); taking one is a decision, in `spillway_decisions_total`",
        "—",
    ),
    metric(
        "spillway_takes_given_back_total",
        "counter",
        "`reason`: `cancelled`, `store_failed`",
        "checks taking holds of a `concurrency` rule that the service gave back on its own: `cancelled`, the call was dropped before the store answered (Envoy reset the stream when its client went away, or a deadline passed); `store_failed`, the store did not answer (a timed-out take may have committed). Given back as `/v1/release` would",
        "—",
    ),
    metric(
        "spillway_holds_lapsed_total",
        "counter",
        "as `rule` below",
        "holds of a `concurrency` rule whose lease ran out before anyone gave them back (a holder that crashed, or a lost stream-done call), counted when the next take or release on their key clears them, within a lease of the key's last hold lapsing",
        "—",
    ),
    metric(
        "spillway_budget_alerts_total",
        "counter",
        "`domain`; `outcome`: `reached`, `sent`, `dropped`, `failed`",
        "budget alerts (a limit's `alert_at`): `reached`, a threshold a key's use reached first in its window, once across replicas (the store decides it with the charge), counted by the replica that made the charge and queued for the webhook (`alert_webhook`); `sent`, delivered (a 2xx); `dropped`, the queue was full (`alert_queue`); `failed`, given up after 12 tries over about four minutes",
        "—",
    ),
    metric(
        "spillway_holds_in_use",
        "gauge",
        "as `rule` below",
        "holds of a `concurrency` rule in use now, over the keys this replica decided on, each as the store said at this replica's latest decision there (0 once its holds have all lapsed); counted at each scrape. Behind a balancer that spreads a key's requests over replicas, `max` across replicas; with keys pinned to replicas, `sum`",
        "—",
    ),
    metric(
        "spillway_overrides",
        "gauge",
        "—",
        "overrides (limits set as data, `/v1/limits`) this replica applies now, every domain together",
        "—",
    ),
    metric(
        "spillway_override_changes_total",
        "counter",
        "`op`: `put`, `delete`",
        "overrides changed through this replica's admin API (each also logged under `spillway::audit`: who, the path, before and after)",
        "—",
    ),
    metric(
        "spillway_override_sync_failures_total",
        "counter",
        "—",
        "polls for overrides changed on other replicas that failed (the store did not answer): the replica keeps applying the overrides it has, and tries again every 250 ms",
        "—",
    ),
    metric(
        "spillway_rlqs_streams",
        "gauge",
        "—",
        "Rate Limit Quota Service streams open (one per Envoy and domain)",
        "—",
    ),
    metric(
        "spillway_rlqs_buckets",
        "gauge",
        "—",
        "RLQS buckets held (a domain and the pairs of a bucket id, whoever reports it)",
        "—",
    ),
    metric(
        "spillway_rlqs_reports_total",
        "counter",
        "—",
        "RLQS usage reports received (Envoy 1.40 sends one a stream every 5 s, and one for each new bucket)",
        "—",
    ),
    metric(
        "spillway_rlqs_assignments_total",
        "counter",
        "—",
        "RLQS bucket answers taken by their Envoys (assignments with each report, blanket rules, abandons; an answer replaced by a newer one before its Envoy took it is not counted)",
        "—",
    ),
    metric(
        "spillway_rlqs_share_ratio",
        "histogram",
        "`domain` (a configured domain, or `unknown`)",
        "each Envoy's share of an RLQS bucket's rate, at each of its reports (its Envoys' shares and demands one by one: `/v1/rlqs/explain`)",
        "—",
    ),
    metric(
        "spillway_rlqs_abandoned_total",
        "counter",
        "—",
        "RLQS buckets abandoned: reported with no request for `rlqs_abandon_after`",
        "—",
    ),
    metric(
        "spillway_rlqs_refused_buckets_total",
        "counter",
        "`reason`: `no_bucket_id`, `bucket_id_too_large` (over 16 pairs or 256 bytes a key), `too_many_buckets` (past `rlqs_max_buckets` on its stream), `store_failed` (on Redis, the grant failed: Envoy runs its last assignment to its TTL), `breaker_open` (on Redis, RLQS's breaker is open after failures: likewise), `withheld` (the others' live shares left the reporter nothing while a closed stream's share lingers: it is sent nothing, so an Envoy that came back keeps what it runs; left nothing by open streams, it is sent DENY_ALL until its next report), `unmatched` (no rule matches and `rlqs_unmatched` is `no_answer`), `undelivered` (an answer its Envoy did not take within 2 s: a later report brings a fresh one)",
        "reported RLQS buckets given no assignment (Envoy's `no_assignment_behavior` applies to them)",
        "—",
    ),
    metric(
        "spillway_rlqs_refused_streams_total",
        "counter",
        "—",
        "RLQS streams refused `RESOURCE_EXHAUSTED`: `rlqs_max_streams` were open",
        "—",
    ),
    metric(
        "spillway_wait_seconds",
        "histogram",
        "`api`: `grpc` and `json` (the answer held for the wait), `http` (`/v1/check`: waited by the server or told to the caller)",
        "how long requests admitted after a wait (a rule's `max_wait`) were to wait (buckets 50 µs to 5 s)",
        "—",
    ),
    metric(
        "spillway_waiters",
        "gauge",
        "`api`: `grpc`, `json`, `http` (`/v1/check` with `wait`)",
        "answers held for their wait now: requests admitted after a wait that have not gone ahead yet (a caller that went away is not one); at most `max_waiters`",
        "—",
    ),
    metric(
        "spillway_waits_refused_total",
        "counter",
        "`api`: `grpc`, `json`, `http` (`/v1/check` with `wait`)",
        "requests that would have waited, refused because `max_waiters` answers were held already (told to retry after their wait)",
        "—",
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
        "`store`: `main`, `per_second` (`per_second_store`); `kind`: `timeout`, `error`, `breaker_open` (no call made)",
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
        "spillway_breaker_opened_total",
        "counter",
        "`store`: `main`, `per_second`",
        "times each store's circuit breaker opened from closed (each a cool-down of calls answered by their failure policy; a failed probe opening it again is not counted)",
        "—",
    ),
    metric(
        "spillway_breaker_state",
        "gauge",
        "`store`: `main`, `per_second` (value: `0` closed, `1` open, `2` half-open)",
        "each store's circuit breaker",
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
        "spillway_grpc_deadline_exceeded_total",
        "counter",
        "—",
        "gRPC calls not done within grpc_request_timeout (or the caller's shorter grpc-timeout), answered DEADLINE_EXCEEDED: a stalled or slow request body",
        "—",
    ),
    metric(
        "spillway_connections",
        "gauge",
        "`listener`: `http`, `grpc`, `grpc_uds`, `admin`, `metrics`",
        "connections open (each one a file descriptor)",
        "—",
    ),
    metric(
        "spillway_connections_refused_total",
        "counter",
        "`listener`: as above",
        "connections closed as soon as they were accepted: the listener had max_connections open",
        "—",
    ),
    metric(
        "spillway_connections_idle_closed_total",
        "counter",
        "`listener`: as above",
        "connections closed after idle_timeout with no request in flight (HTTP/2: GOAWAY first)",
        "—",
    ),
    metric(
        "spillway_connections_aged_out_total",
        "counter",
        "`listener`: as above",
        "connections asked to go away at max_connection_age (HTTP/2: GOAWAY), their calls in flight given max_connection_age_grace",
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
        "spillway_tower_settle_errors_total",
        "counter",
        "—",
        "the tower layer: metered requests whose usage could not be settled (the store failed after the response)",
        "—",
    ),
    metric(
        "spillway_tower_renewals_failed_total",
        "counter",
        "—",
        "the tower layer: renewals of a held response's `concurrency` holds (every half lease) that the store denied (the hold had lapsed and its slots were taken) or did not answer; tried again half a lease later",
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
         crates/server/tests/it/reference_pages.rs fails when this page and the code differ. -->\n\n\
         Every metric Spillway exports, in Prometheus' text format at `/metrics` on the HTTP \
         and admin listeners (and on `metrics_addr`, when set). Labels come from the \
         configuration or from the fixed sets below, never from request values, so a flood \
         of distinct keys cannot grow the exposition. The `spillway_tower_*` metrics are the \
         tower layer's, recorded in the embedding application's own recorder: install it \
         before the layer answers its first request (the layer keeps its counter of admitted \
         requests from then on).\n\n\
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
    out.push_str(REFERENCE_INTRO);
    let mapper = crate::stats::mapper::Mapper::reference();
    let series = |name: &str, kind| match mapper.map(name, kind) {
        None => "— (dropped)".to_owned(),
        Some(m) => {
            let labels: Vec<String> = m
                .labels
                .iter()
                .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
                .collect();
            format!("`{}{{{}}}`", m.name, labels.join(",")).replace("{}", "")
        }
    };
    for s in crate::stats::REFERENCE_STATS {
        let kind = match s.kind {
            crate::stats::mapper::Kind::Counter => "counter",
            crate::stats::mapper::Kind::Gauge => "gauge",
            crate::stats::mapper::Kind::Timer => "timer (ms)",
        };
        // A rule's stats by its path's depth: one level, and three (Envoy Gateway's).
        let shown = if s.name.contains("<path>") {
            let one = s.name.replace("<domain>", "D").replace("<path>", "K1");
            let three = s
                .name
                .replace("<domain>", "D")
                .replace("<path>", "K1.K2.K3");
            format!("{}; {}", series(&one, s.kind), series(&three, s.kind))
        } else {
            series(&s.name.replace("<domain>", "D"), s.kind)
        };
        let _ = writeln!(out, "| `{}` | {kind} | {shown} | {} |", s.name, s.help);
    }
    out
}

const REFERENCE_INTRO: &str = "\n## The reference's series\n\n\
With `reference_metrics` (on wherever the reference's variables are in use), `/metrics` \
also serves the reference's stats as its in-process exporter names them: each statsd \
name below through the reference's default statsd_exporter mapping, or the file \
`prometheus_mapper` (`PROMETHEUS_MAPPER_YAML`) names. They count **hits** as the reference \
counts them (`hits_addend`; a stream-done charge of 600 is 600), where `spillway_*` count \
decisions. With `statsd_addr` the same stats go to statsd (counters as deltas every \
`stats_flush_interval`, the timer in ms). `<path>` is the rule's path as \
`ratelimit.service.rate_limit.<domain>.<path>` in the reference: levels joined by `.`, \
each `key_value` or `key` as the rule is written, `:` and `|` and an IPv4 address's dots \
written as `_`. The default mapping labels a one-level path `domain`, `key1` and a path of \
three levels or more `domain`, `key1`, `key2`; a two-level path matches neither of its \
patterns and has a series of its own (`ratelimit_service_rate_limit_D_K1_K2_total_hits`, \
unlabelled), as in the reference. Below, `D` is a domain and `K1`… a path's levels.\n\n\
| statsd name | type | Prometheus series (default mapping) | meaning |\n|---|---|---|---|\n";
