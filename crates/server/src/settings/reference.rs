//! The reference service's variables that Spillway does not honour, and why: `serve`
//! names each one that is set in a warning (the README lists them too).

/// The reference's variables Spillway reads but does not act on, or does not read, each
/// with why: `serve` logs a warning for each one that is set. (Prefixes end in `_`.)
pub const NOT_HONOURED: &[(&str, &str)] = &[
    (
        "BACKEND_TYPE",
        "counters live in Redis or in memory (--store); there is no memcache backend",
    ),
    ("MEMCACHE_", "there is no memcache backend"),
    (
        "REDIS_PERSECOND",
        "one store holds every counter; there is no per-second Redis",
    ),
    (
        "REDIS_PERSECOND_",
        "one store holds every counter; there is no per-second Redis",
    ),
    (
        "REDIS_POOL_SIZE",
        "one multiplexed connection per Redis node; there is no pool",
    ),
    (
        "REDIS_PIPELINE_",
        "each decision is one script call; calls are coalesced without a window",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "each Cluster node has its own connection",
    ),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "there is no pool"),
    (
        "REDIS_TIMEOUT",
        "use --store-timeout (default 10ms; the reference's 10s would outlast Envoy's deadline)",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "/readyz and the gRPC health service PING the store",
    ),
    (
        "REDIS_STARTUP_",
        "the store is waited for with its own backoff (1 s doubling to 30 s, forever)",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "keys expire when their window ends; there is no jitter",
    ),
    (
        "USE_STATSD",
        "metrics are Prometheus at /metrics on the HTTP port",
    ),
    (
        "STATSD_",
        "metrics are Prometheus at /metrics on the HTTP port",
    ),
    (
        "USE_DOG_STATSD",
        "metrics are Prometheus at /metrics on the HTTP port",
    ),
    ("EXTRA_TAGS", "metrics carry no extra labels"),
    (
        "STATS_FLUSH_INTERVAL",
        "Prometheus metrics are read when scraped",
    ),
    ("DISABLE_STATS", "metrics are always on"),
    ("TRACING_", "there is no tracing export"),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "there is no tracing export (Envoy Gateway sets it with TRACING_*)",
    ),
    ("GRPC_UDS", "gRPC listens on TCP only"),
    (
        "PROMETHEUS_MAPPER_YAML",
        "metrics have Spillway's own names (spillway_*); there is no statsd mapping",
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
    (
        "GRPC_MAX_CONNECTION_AGE",
        "connections are kept until the client closes them",
    ),
    (
        "USE_DOG_STATSD_MOGRIFIERS",
        "metrics are Prometheus at /metrics on the HTTP port",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "connections are kept until the client closes them",
    ),
    ("PROTO", "Spillway listens on TCP only"),
    (
        "RUNTIME_IGNOREDOTFILES",
        "files whose names start with a dot are always skipped",
    ),
];

/// Variables honoured at one value only (the one Spillway always behaves as): set to
/// it, they are not named.
const HONOURED_AT: &[(&str, &str)] = &[
    ("PROTO", "tcp"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("USE_STATSD", "false"),
];

/// The reference variables that are set (name, value) and that Spillway does not
/// honour, with why.
pub fn not_honoured(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, &'static str)> {
    let mut found: Vec<(String, &'static str)> = vars
        .into_iter()
        .filter(|(name, value)| {
            !HONOURED_AT
                .iter()
                .any(|(n, v)| n == name && value.eq_ignore_ascii_case(v))
        })
        .filter_map(|(name, _)| {
            let (_, why) = NOT_HONOURED.iter().find(|(n, _)| {
                if n.ends_with('_') {
                    name.starts_with(n)
                } else {
                    name == *n
                }
            })?;
            Some((name, *why))
        })
        .collect();
    found.sort();
    found
}
