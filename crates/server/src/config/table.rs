//! Every setting, declared once: its name (the settings-file key; the flag and the
//! `SPILLWAY_*` variable are made from it), section, default, format, one line of
//! meaning, and how its raw value writes its field. Adding a setting is one row here,
//! its field in the section, and (if the reference has a variable for it) one row in
//! `reference.rs`.

use super::value::{
    addr, admin_addr, boolean, breaker_ratio, duration, duration_above_zero, list, log_format,
    mogrifiers, number, optional, otlp_protocol, pairs, ratio, statsd_protocol, store_window,
    verify, webhook,
};
use super::{Config, TlsListeners, XdsTls};

/// How a setting's value is read and shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Any text the setting's parser reads.
    Text,
    /// `true` or `false`; as a flag, `--name` alone means true.
    Bool,
    /// Items separated by commas; as a flag, repeated or comma-separated; in a settings
    /// file, a YAML list too.
    List,
    /// A file or directory: relative to the settings file when written there.
    Path,
    /// A secret: never a flag (argv is public), shown as `***`.
    Secret,
}

/// One setting.
#[derive(Clone, Copy)]
pub struct Setting {
    /// The settings-file key; `--name-with-dashes` and `SPILLWAY_NAME` are made from it.
    pub name: &'static str,
    /// The [`Config`] section it belongs to.
    pub section: &'static str,
    /// The default, as a source would write it (read by `set` like any other value).
    pub default: &'static str,
    /// The default where the reference's variables are in use, where it differs.
    pub reference_default: Option<&'static str>,
    /// What a value looks like.
    pub format: &'static str,
    /// One line of meaning.
    pub help: &'static str,
    pub kind: Kind,
    /// Flags of their own that set a fixed value (`--no-watch` is `watch: false`).
    pub switches: &'static [(&'static str, &'static str)],
    /// Writes the field from a raw value; the error says what is wrong with it.
    pub set: fn(&mut Config, &str) -> Result<(), String>,
}

impl std::fmt::Debug for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Setting {
    /// `--store-timeout`, or `None` for a secret.
    pub fn flag(&self) -> Option<String> {
        (self.kind != Kind::Secret).then(|| self.name.replace('_', "-"))
    }

    /// `SPILLWAY_STORE_TIMEOUT`.
    pub fn env(&self) -> String {
        format!("SPILLWAY_{}", self.name.to_ascii_uppercase())
    }

    /// The `SPILLWAY_*` variable of a switch flag (`--no-ui`: `SPILLWAY_NO_UI`).
    pub fn switch_env(flag: &str) -> String {
        format!("SPILLWAY_{}", flag.replace('-', "_").to_ascii_uppercase())
    }
}

/// The row named `name`.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

const fn row(
    name: &'static str,
    section: &'static str,
    default: &'static str,
    format: &'static str,
    help: &'static str,
    kind: Kind,
    set: fn(&mut Config, &str) -> Result<(), String>,
) -> Setting {
    Setting {
        name,
        section,
        default,
        reference_default: None,
        format,
        help,
        kind,
        switches: &[],
        set,
    }
}

impl Setting {
    const fn reference_default(mut self, v: &'static str) -> Setting {
        self.reference_default = Some(v);
        self
    }

    const fn switches(mut self, s: &'static [(&'static str, &'static str)]) -> Setting {
        self.switches = s;
        self
    }
}

use Kind::{Bool, List, Path, Secret, Text};

const ADDR: &str = "HOST:PORT";
const DURATION: &str = "DURATION (10ms, 2s, 1m)";
const FILE: &str = "FILE";
const BOOL: &str = "true|false";

fn path(v: &str) -> Option<std::path::PathBuf> {
    optional(v).map(Into::into)
}

/// A count of worker threads: at least one, at most 1,024 (a thread each).
fn workers(v: &str) -> Result<usize, String> {
    match number(v)? {
        n @ 1..=1024 => Ok(n),
        n => Err(format!("{n} worker threads: from 1 to 1024")),
    }
}

fn xds_tls(c: &mut Config) -> &mut XdsTls {
    c.rules.xds.tls.get_or_insert_with(XdsTls::default)
}

/// Every setting, by section, in the order they are applied (a row that depends on
/// another comes after it).
pub static SETTINGS: &[Setting] = &[
    // === listen ===
    row("http_addr", "listen", "0.0.0.0:8080", ADDR,
        "HTTP listener: /v1/check, /v1/reserve, /v1/commit, /v1/acquire, /v1/renew, /v1/release, /json, /metrics, /healthz, /readyz, /healthcheck",
        Text, |c, v| { c.listen.http = addr(v)?; Ok(()) }),
    row("grpc_addr", "listen", "0.0.0.0:8081", ADDR,
        "gRPC listener: Envoy's ShouldRateLimit, the Rate Limit Quota Service's streams and gRPC health",
        Text, |c, v| { c.listen.grpc = addr(v)?; Ok(()) }),
    row("header_read_timeout", "listen", "5s", DURATION,
        "how long an HTTP client may take to send its first byte, its headers, then its body (each)",
        Text, |c, v| { c.listen.header_read_timeout = duration(v)?; Ok(()) }),
    row("grpc_request_timeout", "listen", "5s", DURATION,
        "the longest a gRPC call may take, its request body included (a shorter grpc-timeout wins): then DEADLINE_EXCEEDED",
        Text, |c, v| { c.listen.grpc_request_timeout = duration(v)?; Ok(()) }),
    row("idle_timeout", "listen", "5m", DURATION,
        "a connection with no request in flight for this long is closed (HTTP/2: GOAWAY first; 0s: never)",
        Text, |c, v| { c.listen.idle_timeout = duration(v)?; Ok(()) }),
    row("max_connections", "listen", "0", "N",
        "connections each listener keeps open at once; one more is closed as soon as it is accepted (0: no cap but the file descriptor limit)",
        Text, |c, v| { c.listen.max_connections = Some(number(v)?).filter(|&n: &usize| n > 0); Ok(()) }),
    row("drain_timeout", "listen", "10s", DURATION,
        "on SIGTERM, how long requests in flight may take to finish",
        Text, |c, v| { c.listen.drain_timeout = duration(v)?; Ok(()) }),
    row("max_connection_age", "listen", "0s", DURATION,
        "a gRPC connection older than this, less up to a tenth at random so that connections made together do not all go at once, is asked to go away (HTTP/2 GOAWAY): a busy Envoy's next calls then reach replicas added since (0s: never)",
        Text, |c, v| { c.listen.max_connection_age = duration(v)?; Ok(()) })
        .reference_default("24h"),
    row("max_connection_age_grace", "listen", "1h", DURATION,
        "how long the calls in flight on a gRPC connection asked to go away may take before it is closed",
        Text, |c, v| { c.listen.max_connection_age_grace = duration(v)?; Ok(()) }),
    row("grpc_uds", "listen", "", FILE,
        "gRPC (ShouldRateLimit and health) on this Unix socket as well; a socket file left there is replaced",
        Path, |c, v| { c.listen.grpc_uds = path(v); Ok(()) }),
    // === tls ===
    row("tls_cert", "tls", "", FILE,
        "PEM certificate chain to serve (leaf first); reloaded when the file changes and on SIGHUP",
        Path, |c, v| { c.tls.cert = path(v); Ok(()) }),
    row("tls_key", "tls", "", FILE,
        "PEM private key of tls_cert (PKCS#8, PKCS#1 or SEC1)",
        Path, |c, v| { c.tls.key = path(v); Ok(()) }),
    row("tls_client_ca", "tls", "", FILE,
        "PEM CAs whose client certificates are required (mutual TLS); health probes need none",
        Path, |c, v| { c.tls.client_ca = path(v); Ok(()) }),
    row("tls_client_san", "tls", "", "NAME,...",
        "a client certificate must name one of these among its SANs (DNS, IP, URI, email)",
        List, |c, v| { c.tls.client_sans = list(v); Ok(()) }),
    row("tls_listeners", "tls", "", "grpc,http,admin|none",
        "which listeners speak TLS (empty: grpc and http when tls_cert is given)",
        List, |c, v| { c.tls.listeners = optional(v).map(TlsListeners::parse).transpose()?; Ok(()) }),
    // === store ===
    row("store", "store", "memory", "memory|URL",
        "where counters live: memory, or redis://, rediss://, unix://, redis+cluster://, redis+sentinel://",
        Text, |c, v| { c.store.url = v.to_owned(); Ok(()) }),
    row("store_timeout", "store", "10ms", DURATION,
        "give up on a store call after this long, at least (more when Redis's round trips are slow and vary, up to store_timeout_max)",
        Text, |c, v| { c.store.timeout = duration(v)?; Ok(()) }),
    row("store_timeout_max", "store", "", DURATION,
        "the most a store call gets: a smoothed round trip plus four deviations, as TCP times out (empty: twice store_timeout; equal to it: fixed)",
        Text, |c, v| { c.store.timeout_max = optional(v).map(duration).transpose()?; Ok(()) }),
    row("store_window", "store", "0s", DURATION,
        "how long a decision that finds no store call in flight waits for others to share its call (at most 1ms; 0s: it goes at once): fewer calls for Redis at everyday rates, the window added to those decisions' latency",
        Text, |c, v| { c.store.window = store_window(v)?; Ok(()) }),
    row("on_store_error", "store", "closed", "open|closed|local",
        "for rules without their own: admit, refuse (503 / UNAVAILABLE), or decide in process",
        Text, |c, v| { c.store.on_error = v.parse()?; Ok(()) }),
    row("breaker_failures", "store", "5", "N",
        "the least number of store failures in breaker_window that opens the circuit breaker (when they are also breaker_ratio of its calls)",
        Text, |c, v| { c.store.breaker_failures = number(v)?; Ok(()) }),
    row("breaker_ratio", "store", "0.5", "0..1",
        "the part of the store calls in breaker_window that must fail to open the circuit breaker (above 0; 1: every one): a stall that times out a few calls among thousands leaves it closed",
        Text, |c, v| { c.store.breaker_ratio = breaker_ratio(v)?; Ok(()) }),
    row("breaker_window", "store", "1s", DURATION,
        "the sliding window of store calls that breaker_failures and breaker_ratio are counted in",
        Text, |c, v| { c.store.breaker_window = duration_above_zero(v, "the window")?; Ok(()) }),
    row("breaker_cooldown", "store", "500ms", DURATION,
        "how long the open breaker sends nothing to the store before it tries again",
        Text, |c, v| { c.store.breaker_cooldown = duration(v)?; Ok(()) }),
    row("deny_cache_bytes", "store", "16777216", "BYTES",
        "the deny cache's size (0: off): keys the store denied are answered locally until a known time",
        Text, |c, v| { c.store.deny_cache_bytes = number(v)?; Ok(()) })
        .switches(&[("no-deny-cache", "0")]),
    row("memory_store_bytes", "store", "536870912", "BYTES",
        "the memory store's bound (keys, their texts and states): past it, expired keys go first, then the least recently used",
        Text, |c, v| { c.store.memory_bytes = number(v)?; Ok(()) }),
    row("share_table_bytes", "store", "67108864", "BYTES",
        "the bound of the quota leases, and of the sync counts, each (an entry counted at its largest, a 1 KiB key): past it, new keys are decided by the store",
        Text, |c, v| { c.store.share_bytes = number(v)?; Ok(()) }),
    row("reference_local_cache", "store", "false", BOOL,
        "the deny cache also answers reference rules until their window ends, as the reference's local cache",
        Bool, |c, v| { c.store.reference_local_cache = boolean(v)?; Ok(()) }),
    row("key_prefix", "store", "", "TEXT",
        "written before every counter key and RLQS bucket: services with different prefixes count and share apart in one store",
        Text, |c, v| { c.store.key_prefix = v.to_owned(); Ok(()) }),
    row("redis_cluster_shards", "store", "3", "N",
        "on Redis Cluster, the virtual shards keys are spread over, so that one call decides many key groups (0: a slot per group; at most 1024); every process on one Cluster must agree, and counts start afresh when it changes",
        Text, |c, v| { c.store.cluster_shards = number(v)?; Ok(()) }),
    row("health_follows_store", "store", "false", BOOL,
        "/healthcheck and gRPC health also fail while no connection to the store is up (a slow reply never fails them); off, a store outage leaves replicas healthy and each request follows its failure policy. /readyz always PINGs the store",
        Bool, |c, v| { c.store.health_follows_store = boolean(v)?; Ok(()) }),
    row("per_second_store", "store", "", "URL",
        "a second Redis for the rules whose window is one second (the hot, short-lived keys), with a breaker of its own: those rules decide there and follow their on_store_error when it fails, every other rule on store (empty: one store for all); its TLS files are store's",
        Text, |c, v| {
            match optional(v) {
                None => c.store.per_second = None,
                Some(url) => c.store.per_second.get_or_insert_with(Default::default).url = url.to_owned(),
            }
            Ok(())
        }),
    row("per_second_store_timeout", "store", "", DURATION,
        "give up on a per-second store call after this long (empty: store_timeout)",
        Text, |c, v| {
            if let (Some(p), Some(d)) = (&mut c.store.per_second, optional(v)) {
                p.timeout = Some(duration(d)?);
            }
            Ok(())
        }),
    row("per_second_redis_username", "store", "", "USER",
        "the per-second Redis's ACL user",
        Text, |c, v| {
            if let Some(p) = &mut c.store.per_second { p.redis.username = optional(v).map(Into::into); }
            Ok(())
        }),
    row("per_second_redis_password", "store", "", "SECRET",
        "the per-second Redis's password",
        Secret, |c, v| {
            if let Some(p) = &mut c.store.per_second { p.redis.password = optional(v).map(spillway_redis::Password::new); }
            Ok(())
        }),
    row("per_second_redis_sentinel_username", "store", "", "USER",
        "the per-second store's sentinels' ACL user",
        Text, |c, v| {
            if let Some(p) = &mut c.store.per_second { p.redis.sentinel_username = optional(v).map(Into::into); }
            Ok(())
        }),
    row("per_second_redis_sentinel_password", "store", "", "SECRET",
        "the per-second store's sentinels' password",
        Secret, |c, v| {
            if let Some(p) = &mut c.store.per_second { p.redis.sentinel_password = optional(v).map(spillway_redis::Password::new); }
            Ok(())
        }),
    row("redis_tls_ca", "store", "", FILE,
        "PEM CAs to trust for a rediss:// store (default: the system's roots, or SSL_CERT_FILE)",
        Path, |c, v| { c.store.redis.tls.ca_file = path(v); Ok(()) }),
    row("redis_tls_cert", "store", "", FILE,
        "PEM client certificate to present to Redis (mutual TLS; with redis_tls_key)",
        Path, |c, v| { c.store.redis.tls.client_cert = path(v); Ok(()) }),
    row("redis_tls_key", "store", "", FILE,
        "PEM private key of redis_tls_cert",
        Path, |c, v| { c.store.redis.tls.client_key = path(v); Ok(()) }),
    row("redis_tls_verify", "store", "full", "full|chain|none",
        "how much of Redis's certificate to verify: chain and name, chain only, nothing (tests only; warned)",
        Text, |c, v| { c.store.redis.tls.verify = verify(v)?; Ok(()) }),
    row("redis_username", "store", "", "USER",
        "the Redis ACL user (over the URL's)",
        Text, |c, v| { c.store.redis.username = optional(v).map(Into::into); Ok(()) }),
    row("redis_password", "store", "", "SECRET",
        "the Redis password (over the URL's); prefer redis_password_file",
        Secret, |c, v| { c.store.redis.password = optional(v).map(spillway_redis::Password::new); Ok(()) }),
    row("redis_password_file", "store", "", FILE,
        "a file whose first line is the Redis password: in neither argv nor the environment",
        Path, |c, v| {
            if let Some(p) = path(v) {
                c.store.redis.password = Some(spillway_redis::Password::from_file(&p).map_err(|e| e.to_string())?);
            }
            Ok(())
        }),
    row("redis_sentinel_username", "store", "", "USER",
        "the sentinels' ACL user (redis+sentinel:// stores)",
        Text, |c, v| { c.store.redis.sentinel_username = optional(v).map(Into::into); Ok(()) }),
    row("redis_sentinel_password", "store", "", "SECRET",
        "the sentinels' password; prefer redis_sentinel_password_file",
        Secret, |c, v| { c.store.redis.sentinel_password = optional(v).map(spillway_redis::Password::new); Ok(()) }),
    row("redis_sentinel_password_file", "store", "", FILE,
        "a file whose first line is the sentinels' password",
        Path, |c, v| {
            if let Some(p) = path(v) {
                c.store.redis.sentinel_password = Some(spillway_redis::Password::from_file(&p).map_err(|e| e.to_string())?);
            }
            Ok(())
        }),
    // === rules ===
    row("config", "rules", "policies", "FILE|DIR",
        "a policy file, or a directory of them (one domain per file)",
        Path, |c, v| { c.rules.path = v.into(); Ok(()) }),
    row("candidate_config", "rules", "", "FILE|DIR",
        "candidate policies decided in shadow on the same traffic, on counters of their own, answering nobody",
        Path, |c, v| { c.rules.candidate = path(v); Ok(()) }),
    row("overrides_file", "rules", "", "FILE|off",
        "with the memory store, where overrides set by the admin API (/v1/limits) are kept: by default beside `config` (policies.yaml: policies.overrides.ndjson); `off`: in this process only, lost at a restart. On Redis they are kept in Redis",
        Path, |c, v| { c.rules.overrides_file = path(v); Ok(()) }),
    row("watch", "rules", "true", BOOL,
        "reload the policies when their files change",
        Bool, |c, v| { c.rules.watch = boolean(v)?; Ok(()) })
        .switches(&[("no-watch", "false")]),
    row("merge_domains", "rules", "false", BOOL,
        "files that declare the same domain make one domain",
        Bool, |c, v| { c.rules.merge_domains = boolean(v)?; Ok(()) }),
    row("ready_needs_a_domain", "rules", "false", BOOL,
        "not ready while no domain is loaded",
        Bool, |c, v| { c.rules.ready_needs_a_domain = boolean(v)?; Ok(()) }),
    row("xds_server", "rules", "", ADDR,
        "take the live rules from this ADS server instead of policy files (empty: files)",
        Text, |c, v| { c.rules.xds.server = optional(v).map(Into::into); Ok(()) }),
    row("xds_node_id", "rules", "default", "ID",
        "the node id the ADS server knows this service by",
        Text, |c, v| { c.rules.xds.node_id = v.to_owned(); Ok(()) }),
    row("xds_node_metadata", "rules", "", "K=V,...",
        "the node's metadata",
        List, |c, v| { c.rules.xds.node_metadata = pairs(v, '=')?; Ok(()) }),
    row("xds_headers", "rules", "", "K:V,...",
        "gRPC metadata sent with the xDS stream",
        List, |c, v| { c.rules.xds.headers = pairs(v, ':')?; Ok(()) }),
    row("xds_tls", "rules", "false", BOOL,
        "TLS to the ADS server (any xds_tls_* file turns it on too)",
        Bool, |c, v| {
            c.rules.xds.tls = boolean(v)?.then(|| c.rules.xds.tls.take().unwrap_or_default());
            Ok(())
        }),
    row("xds_tls_ca", "rules", "", FILE,
        "PEM CAs to trust for the ADS server",
        Path, |c, v| { if let Some(p) = path(v) { xds_tls(c).server_ca = Some(p); } Ok(()) }),
    row("xds_tls_cert", "rules", "", FILE,
        "PEM client certificate to present to the ADS server",
        Path, |c, v| { if let Some(p) = path(v) { xds_tls(c).client_cert = Some(p); } Ok(()) }),
    row("xds_tls_key", "rules", "", FILE,
        "PEM private key of xds_tls_cert",
        Path, |c, v| { if let Some(p) = path(v) { xds_tls(c).client_key = Some(p); } Ok(()) }),
    row("xds_tls_san", "rules", "", "NAME",
        "the name the ADS server's certificate must carry (default: the server's host)",
        Text, |c, v| { if let Some(n) = optional(v) { xds_tls(c).server_san = Some(n.into()); } Ok(()) }),
    row("xds_backoff_initial", "rules", "1s", DURATION,
        "the xDS reconnect backoff's first wait; it doubles up to xds_backoff_max",
        Text, |c, v| { c.rules.xds.backoff_initial = duration(v)?; Ok(()) })
        .reference_default("10s"),
    row("xds_backoff_max", "rules", "60s", DURATION,
        "the xDS reconnect backoff's longest wait",
        Text, |c, v| { c.rules.xds.backoff_max = duration(v)?; Ok(()) }),
    row("xds_max_message_bytes", "rules", "4194304", "BYTES",
        "the largest xDS response accepted",
        Text, |c, v| { c.rules.xds.max_message_bytes = number(v)?; Ok(()) }),
    row("xds_ready_without_rules", "rules", "false", BOOL,
        "ready before the first rules arrive over xDS, deciding with none until they do",
        Bool, |c, v| { c.rules.xds.ready_without_rules = boolean(v)?; Ok(()) }),
    // === service ===
    row("shadow_mode", "service", "false", BOOL,
        "never answer over-limit overall (statuses still say who is over)",
        Bool, |c, v| { c.service.shadow_mode = boolean(v)?; Ok(()) }),
    row("quota_mode", "service", "false", BOOL,
        "every reference rule is quota-mode",
        Bool, |c, v| { c.service.quota_mode = boolean(v)?; Ok(()) }),
    row("near_limit_ratio", "service", "0.8", "0..1",
        "past this share of its limit an admitted request counts as near the limit",
        Text, |c, v| { c.service.near_limit_ratio = ratio(v)?; Ok(()) }),
    row("stop_increment_when_over_limit", "service", "false", BOOL,
        "a request one reference rule denies charges only the rules it is over",
        Bool, |c, v| { c.service.stop_increment_when_over_limit = boolean(v)?; Ok(()) }),
    row("dynamic_metadata", "service", "false", BOOL,
        "answers carry the request and the passing rules' metadata as dynamic metadata",
        Bool, |c, v| { c.service.dynamic_metadata = boolean(v)?; Ok(()) }),
    row("max_request_work", "service", "256", "N",
        "the most store work one request may ask for, in decisions of a fixed window (a sliding window of precision P is 1 + P/64, a log of limit L 1 + L/64): more is refused, as Redis runs one script at a time",
        Text, |c, v| { c.service.max_request_work = number(v)?; Ok(()) }),
    row("max_waiters", "service", "10000", "N",
        "the most answers held for their waits at once (a rule's max_wait; gRPC, /json, /v1/check with \"wait\": true): past it a request that would wait is refused (429, OVER_LIMIT) with its wait as retry_after, and its reserved slot lapses unused; each is a request in flight with its timer",
        Text, |c, v| { c.service.max_waiters = number(v)?; Ok(()) }),
    row("alert_webhook", "service", "", "URL",
        "where budget alerts go (a limit's alert_at): each threshold a key's use reaches first in a window is POSTed here as JSON, once across replicas, tried again with backoff for about four minutes (empty: alerts are counted, not sent)",
        Text, |c, v| { c.service.alert_webhook = webhook(v)?; Ok(()) }),
    row("alert_queue", "service", "10000", "N",
        "the most budget alerts waiting for the webhook; past it an alert is dropped and counted",
        Text, |c, v| { c.service.alert_queue = number(v)?; Ok(()) }),
    row("worker_threads", "service", "", "1..1024",
        "threads that serve requests (the runtime's workers; empty: one per CPU the process may use, a cgroup's quota counted, or TOKIO_WORKER_THREADS): 1 on a one-CPU sidecar or a node shared with busy neighbours keeps the tail lower",
        Text, |c, v| { c.service.worker_threads = optional(v).map(workers).transpose()?; Ok(()) }),
    row("grpc_limit_overrides", "service", "allow", "allow|ignore|refuse",
        "a gRPC request's own limit (Envoy's per-descriptor limit, from route configuration): used as the reference does, dropped, or refused",
        Text, |c, v| { c.service.grpc_callers.overrides = v.parse()?; Ok(()) }),
    row("http_limit_overrides", "service", "refuse", "allow|ignore|refuse",
        "a /v1/check or /json request's own limit: used, dropped, or refused (any host that reaches the HTTP port could otherwise lift a rule's limit)",
        Text, |c, v| { c.service.http_callers.overrides = v.parse()?; Ok(()) })
        .reference_default("allow"),
    row("grpc_max_hits", "service", "", "N",
        "the most hits (cost) one gRPC descriptor may ask for; more is refused (empty: up to 2^53)",
        Text, |c, v| { c.service.grpc_callers.max_hits = optional(v).map(number).transpose()?; Ok(()) }),
    row("http_max_hits", "service", "", "N",
        "the most hits (cost) one /v1/check or /json descriptor may ask for; more is refused (empty: up to 2^53)",
        Text, |c, v| { c.service.http_callers.max_hits = optional(v).map(number).transpose()?; Ok(()) }),
    // === headers ===
    row("headers", "headers", "ietf", "ietf|legacy|x-ratelimit|none",
        "/v1/check's rate limit headers",
        Text, |c, v| { c.headers.style = v.parse()?; Ok(()) }),
    row("reference_headers", "headers", "false", BOOL,
        "gRPC and /json answers carry the reference's three rate limit headers",
        Bool, |c, v| {
            c.headers.reference = boolean(v)?.then(|| c.headers.reference.take().unwrap_or_else(reference_names));
            Ok(())
        }),
    row("reference_limit_header", "headers", "RateLimit-Limit", "NAME",
        "the reference header that carries the limit",
        Text, |c, v| { if let Some(h) = &mut c.headers.reference { h[0] = v.to_owned(); } Ok(()) }),
    row("reference_remaining_header", "headers", "RateLimit-Remaining", "NAME",
        "the reference header that carries what remains",
        Text, |c, v| { if let Some(h) = &mut c.headers.reference { h[1] = v.to_owned(); } Ok(()) }),
    row("reference_reset_header", "headers", "RateLimit-Reset", "NAME",
        "the reference header that carries the seconds to the window's end",
        Text, |c, v| { if let Some(h) = &mut c.headers.reference { h[2] = v.to_owned(); } Ok(()) }),
    // === admin ===
    row("admin_addr", "admin", "127.0.0.1:6070", "HOST:PORT|off",
        "admin listener: /ui, /v1/top, /v1/history, /v1/config, /v1/explain, /v1/rlqs/explain, /v1/limits, /rlconfig, /openapi.json, /metrics, health (loopback: it shows rules and keys)",
        Text, |c, v| { c.admin.addr = admin_addr(v)?; Ok(()) }),
    row("admin_token_file", "admin", "", FILE,
        "a file whose first line is the admin token: requests without it get 401 (health aside)",
        Path, |c, v| {
            c.admin.token = path(v)
                .map(|p| spillway_redis::Password::from_file(&p).map_err(|e| e.to_string()))
                .transpose()?;
            Ok(())
        }),
    row("admin_hosts", "admin", "", "NAME,...",
        "names the admin listener answers to besides IP addresses and localhost (a page under any other name is refused: DNS rebinding)",
        List, |c, v| { c.admin.hosts = list(v); Ok(()) }),
    row("ui", "admin", "true", BOOL,
        "serve the console page at /ui",
        Bool, |c, v| { c.admin.ui = boolean(v)?; Ok(()) })
        .switches(&[("no-ui", "false")]),
    // === metrics ===
    row("metrics_addr", "metrics", "", "HOST:PORT",
        "a listener of its own for Prometheus (empty: none; /metrics is on the HTTP and admin listeners too)",
        Text, |c, v| { c.metrics.addr = optional(v).map(addr).transpose()?; Ok(()) }),
    row("metrics_path", "metrics", "/metrics", "/PATH",
        "the path metrics_addr serves",
        Text, |c, v| {
            if !v.starts_with('/') {
                return Err(format!("`{v}` does not start with /"));
            }
            c.metrics.path = v.to_owned();
            Ok(())
        }),
    // === rlqs ===
    row("rlqs_assignment_ttl", "rlqs", "15s", DURATION,
        "how long an RLQS assignment lives unless a report renews it (whole seconds, at least 1s: Envoy reports every 5s); a stopped Envoy's share goes to the others after it",
        Text, |c, v| {
            let ttl = duration(v)?;
            if ttl < std::time::Duration::from_secs(1) {
                return Err(format!("`{v}` is under a second: Envoy reads whole seconds"));
            }
            c.rlqs.ttl = ttl;
            Ok(())
        }),
    row("rlqs_abandon_after", "rlqs", "5m", DURATION,
        "an RLQS bucket an Envoy reports with no request for this long is abandoned: Envoy forgets it until a request comes again",
        Text, |c, v| { c.rlqs.abandon_after = duration(v)?; Ok(()) }),
    row("rlqs_max_buckets", "rlqs", "1000", "N",
        "the most RLQS buckets one Envoy's stream may hold; buckets past them get no assignment (Envoy's no_assignment_behavior applies)",
        Text, |c, v| {
            let n: usize = number(v)?;
            if n == 0 {
                return Err("at least 1".into());
            }
            c.rlqs.max_buckets = n;
            Ok(())
        }),
    row("rlqs_expire_on_shutdown", "rlqs", "false", BOOL,
        "on shutdown, send every RLQS assignment again with a TTL of 0 before the streams end: Envoy runs its expired_assignment_behavior at once instead of the assignments until their TTL",
        Bool, |c, v| { c.rlqs.expire_on_shutdown = boolean(v)?; Ok(()) }),
    row("rlqs_max_streams", "rlqs", "10000", "N",
        "the most RLQS streams open at once (every connection's, 100 at most a connection); one past them is refused RESOURCE_EXHAUSTED",
        Text, |c, v| {
            let n: usize = number(v)?;
            if n == 0 {
                return Err("at least 1".into());
            }
            c.rlqs.max_streams = n;
            Ok(())
        }),
    row("rlqs_unmatched", "rlqs", "no_answer", "no_answer|allow|deny",
        "what an RLQS bucket no rule matches (an unknown domain, a pair the policy does not know) is sent: no_answer leaves it to Envoy's no_assignment_behavior, allow and deny send ALLOW_ALL or DENY_ALL for the assignment's TTL",
        Text, |c, v| {
            c.rlqs.unmatched = match v {
                "no_answer" => crate::config::Unmatched::NoAnswer,
                "allow" => crate::config::Unmatched::Allow,
                "deny" => crate::config::Unmatched::Deny,
                _ => return Err(format!("`{v}` is not one of no_answer, allow, deny")),
            };
            Ok(())
        }),
    row("rlqs_store_timeout", "rlqs", "1s", DURATION,
        "on Redis, how long one call booking RLQS shares may take (RLQS's own connection, timeout and breaker: a report of many buckets never holds up the decisions)",
        Text, |c, v| { c.rlqs.store_timeout = duration_above_zero(v, "the timeout")?; Ok(()) }),
    // === stats ===
    row("reference_metrics", "stats", "false", BOOL,
        "/metrics also serves the reference's series (ratelimit_service_rate_limit_total_hits{domain,key1,key2} and the rest), counted in hits as the reference counts them, named by prometheus_mapper",
        Bool, |c, v| { c.stats.reference_metrics = boolean(v)?; Ok(()) })
        .reference_default("true"),
    row("prometheus_mapper", "stats", "", FILE,
        "a statsd_exporter mapping file (glob or regex match, name, labels with $n, match_metric_type, action: drop) naming the reference's series in place of the reference's default mapping",
        Path, |c, v| { c.stats.mapper = path(v); Ok(()) }),
    row("statsd_addr", "stats", "", ADDR,
        "send the reference's stats to this statsd (empty: none); never waits: a statsd that is down costs nothing",
        Text, |c, v| { c.stats.statsd = optional(v).map(Into::into); Ok(()) })
        .reference_default("localhost:8125"),
    row("statsd_protocol", "stats", "udp", "udp|tcp",
        "how statsd lines are sent",
        Text, |c, v| { c.stats.statsd_tcp = statsd_protocol(v)?; Ok(()) })
        .reference_default("tcp"),
    row("dogstatsd", "stats", "false", BOOL,
        "DogStatsD: tags as |#k:v rather than in the name (sent over UDP)",
        Bool, |c, v| { c.stats.dogstatsd = boolean(v)?; Ok(()) }),
    row("dogstatsd_mogrifiers", "stats", "", "JSON",
        "DogStatsD renames, in order, the first that matches wins: [{\"pattern\": REGEX, \"name\": \"$1\", \"tags\": [[\"k\", \"$2\"]]}]",
        Text, |c, v| { c.stats.mogrifiers = mogrifiers(v)?; Ok(()) }),
    row("stats_tags", "stats", "", "K:V,...",
        "tags on every statsd line (plain statsd: .__k=v in the name, as the reference writes them)",
        List, |c, v| { c.stats.tags = pairs(v, ':')?; Ok(()) }),
    row("stats_flush_interval", "stats", "10s", DURATION,
        "how often counters go to statsd (as deltas)",
        Text, |c, v| { c.stats.flush_interval = duration_above_zero(v, "the flush interval")?; Ok(()) }),
    // === tracing ===
    row("tracing_endpoint", "tracing", "", "URL",
        "export a span per decision (the domain, the outcome, the store call as a child) over OTLP to this URL: http, the whole URL (http://collector:4318/v1/traces); grpc, the collector (http://collector:4317). Empty: no tracing",
        Text, |c, v| { c.tracing.endpoint = optional(v).map(Into::into); Ok(()) }),
    row("tracing_protocol", "tracing", "http", "http|grpc",
        "OTLP over HTTP (protobuf) or gRPC",
        Text, |c, v| { c.tracing.protocol = otlp_protocol(v)?; Ok(()) }),
    row("tracing_sampling_rate", "tracing", "1", "0..1",
        "the share of decisions traced when the caller's traceparent does not decide it (a caller's sampled flag always wins)",
        Text, |c, v| { c.tracing.sampling_rate = ratio(v)?; Ok(()) }),
    row("tracing_service_name", "tracing", "spillway", "NAME",
        "service.name on every span",
        Text, |c, v| { c.tracing.service_name = v.to_owned(); Ok(()) })
        .reference_default("RateLimit"),
    row("tracing_service_namespace", "tracing", "", "NAME",
        "service.namespace on every span (empty: none)",
        Text, |c, v| { c.tracing.service_namespace = optional(v).map(Into::into); Ok(()) }),
    row("tracing_service_instance_id", "tracing", "", "ID",
        "service.instance.id on every span (empty: none)",
        Text, |c, v| { c.tracing.service_instance_id = optional(v).map(Into::into); Ok(()) }),
    // === log ===
    row("log_level", "log", "info", "LEVEL",
        "error, warn, info, debug, trace, or a tracing filter",
        Text, |c, v| { c.log.level = v.to_ascii_lowercase(); Ok(()) }),
    row("log_format", "log", "text", "text|json",
        "how log lines are written",
        Text, |c, v| { c.log.json = log_format(v)?; Ok(()) }),
    row("log_color", "log", "auto", "auto|always|never",
        "ANSI colours in text logs: auto colours only a terminal, so piped and container logs stay plain",
        Text, |c, v| {
            c.log.color = match v {
                "auto" => None,
                "always" => Some(true),
                "never" => Some(false),
                other => return Err(format!("`{other}` is not auto, always or never")),
            };
            Ok(())
        }),
];

fn reference_names() -> [String; 3] {
    let name = |n: &str| setting(n).map_or_else(String::new, |s| s.default.to_owned());
    [
        name("reference_limit_header"),
        name("reference_remaining_header"),
        name("reference_reset_header"),
    ]
}
