//! The reference's variables Spillway does not honour, and why (`serve` names each one
//! that is set in a warning; docs/reference/settings.md lists them), and whether any of
//! the reference's variables is in use (then the reference's defaults apply).

use super::reference::REFERENCE;
use super::value::boolean;

/// The reference's variables Spillway reads but does not act on, or does not read, each
/// with why: `serve` logs a warning for each one that is set. (Prefixes end in `_`.)
pub const NOT_HONOURED: &[(&str, &str)] = &[
    (
        "BACKEND_TYPE",
        "counters live in Redis or in memory (--store); there is no memcache backend",
    ),
    ("MEMCACHE_", "there is no memcache backend"),
    (
        "REDIS_PERSECOND_POOL_SIZE",
        "one multiplexed connection per Redis node; there is no pool",
    ),
    (
        "REDIS_PERSECOND_PIPELINE_",
        "the per-second store's calls are coalesced as the main store's, with its window (store_window, REDIS_PIPELINE_WINDOW)",
    ),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "each Cluster node has its own connection",
    ),
    ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "there is no pool"),
    (
        "REDIS_POOL_SIZE",
        "one multiplexed connection per Redis node; there is no pool",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "deprecated in the reference, with no effect there: a call carries at most 64 decisions and 512 keys, and the calls waiting meanwhile are coalesced into the next one",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "each Cluster node has its own connection",
    ),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "there is no pool"),
    (
        "REDIS_STARTUP_",
        "the store is waited for with its own backoff (1 s doubling to 30 s, forever)",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "keys expire when their window ends; there is no jitter",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "durations are in seconds, as Prometheus names them",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "the xDS backoff doubles from its initial to its maximum interval, without jitter",
    ),
    (
        "XDS_CLIENT_BACKOFF_JITTER",
        "the xDS backoff doubles from its initial to its maximum interval, without jitter",
    ),
    ("PROTO", "Spillway listens on TCP only"),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "it has no effect in the reference either: reconnects follow the xDS backoff",
    ),
    (
        "RUNTIME_IGNOREDOTFILES",
        "files whose names start with a dot are always skipped",
    ),
];

/// The reference's defaults Spillway does not take where the reference's variables are
/// in use (variable, the reference's default, what Spillway does instead): `serve` names
/// those whose variable is not set in one line at start.
pub const UNREPRODUCED_DEFAULTS: &[(&str, &str, &str)] = &[
    (
        "LOG_LEVEL",
        "warn",
        "info: a line per start, reload and outage, none per request",
    ),
    (
        "DEBUG_HOST",
        "0.0.0.0",
        "the admin listener stays on loopback",
    ),
    (
        "REDIS_URL",
        "/var/run/nutcracker/ratelimit.sock",
        "without REDIS_URL counters are in memory",
    ),
    (
        "REDIS_TIMEOUT",
        "10s",
        "10ms, within Envoy's 20 ms deadline",
    ),
    (
        "REDIS_POOL_SIZE",
        "10",
        "one multiplexed connection per node",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "300",
        "keys expire when their window ends",
    ),
];

/// The line `serve` logs where the reference's variables are in use: the reference's
/// defaults it does not take, of the variables `vars` does not set.
pub fn unreproduced_defaults(vars: &[(String, String)]) -> Option<String> {
    let unset: Vec<String> = UNREPRODUCED_DEFAULTS
        .iter()
        .filter(|(name, _, _)| !vars.iter().any(|(n, _)| n == name))
        .map(|(name, default, instead)| format!("{name}={default} ({instead})"))
        .collect();
    (!unset.is_empty()).then(|| unset.join("; "))
}

/// Variables honoured at one value only (the one Spillway always behaves as): set to
/// it, they are not named.
pub const HONOURED_AT: &[(&str, &str)] = &[
    ("BACKEND_TYPE", "redis"),
    ("PROTO", "tcp"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
];

/// Whether `pattern` (a name, or a prefix ending in `_`) names the variable `name`.
pub(super) fn named(pattern: &str, name: &str) -> bool {
    if pattern.ends_with('_') {
        name.starts_with(pattern)
    } else {
        name == pattern
    }
}

/// Whether any of the reference's variables is set: then the reference's defaults apply.
/// OpenTelemetry's own (`OTEL_*`) do not count: an operator may set them on every
/// process it runs.
pub fn speaks_reference(vars: &[(String, String)]) -> bool {
    vars.iter().any(|(name, _)| {
        !name.starts_with("OTEL_")
            && (REFERENCE
                .iter()
                .any(|r| r.variables.contains(&name.as_str()))
                || NOT_HONOURED.iter().any(|(n, _)| named(n, name)))
    })
}

/// The reference variables that are set (name, value) and that Spillway does not
/// honour, with why: those it never reads, and those read only behind a switch that is
/// not on (`GRPC_SERVER_TLS_CERT` without `GRPC_SERVER_USE_TLS=true`).
pub fn not_honoured(vars: &[(String, String)]) -> Vec<(String, &'static str)> {
    let on = |gate: &str| {
        vars.iter()
            .any(|(n, v)| n == gate && boolean(v).unwrap_or(false))
    };
    let mut found: Vec<(String, &'static str)> = vars
        .iter()
        .filter(|(name, value)| {
            !HONOURED_AT
                .iter()
                .any(|(n, v)| n == name && value.eq_ignore_ascii_case(v))
        })
        .filter_map(|(name, _)| {
            if let Some((_, why)) = NOT_HONOURED.iter().find(|(n, _)| named(n, name)) {
                return Some((name.clone(), *why));
            }
            let gated = REFERENCE.iter().find(|r| {
                r.gate.is_some_and(|g| g != name && !on(g)) && r.variables.contains(&name.as_str())
            })?;
            Some((name.clone(), gated.note))
        })
        .collect();
    found.sort();
    found
}
