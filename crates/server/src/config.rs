//! The service's configuration: one validated [`Config`] made of sections, and the
//! table every setting is declared in ([`SETTINGS`]).
//!
//! This module is a leaf: it imports no runtime module of this crate; the runtime
//! modules import the section they use. A setting is declared once, as a row of
//! [`SETTINGS`] (its name, default, format, meaning and how it writes its field), and
//! every source reaches it through that row:
//!
//! ```text
//! defaults (the rows)  ┐
//! settings file (YAML) ├> Partial: name -> (raw value, origin) ─ merge, later wins ─> build -> Config
//! reference variables  │   (the reference's variables: one row each in reference.rs)
//! flags, SPILLWAY_*    ┘   (made from the rows by the CLI)
//! ```
//!
//! `docs/reference/settings.md` is generated from the same rows ([`reference_page`]),
//! and a test fails when the page and the code disagree.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use spillway_core::headers::HeaderStyle;

mod doc;
mod reference;
mod sources;
mod store;
mod table;
mod tls;
mod unhonoured;
pub mod value;
mod xds;

pub use doc::{REFERENCE_VARIABLES, migration, migration_table, reference_page};
pub use reference::{REFERENCE, ReferenceRow};
pub use sources::{Given, Origin, Partial, Profile, Resolved, Sources};
pub use store::{PerSecond, Store};
pub use table::{Kind, SETTINGS, Setting, setting};
pub use tls::{TlsFiles, TlsListeners};
pub use unhonoured::{
    NOT_HONOURED, UNREPRODUCED_DEFAULTS, not_honoured, speaks_reference, unreproduced_defaults,
};
pub use xds::{Xds, XdsTls};

/// Everything the service needs to know, by section.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: Listen,
    pub tls: Tls,
    pub store: Store,
    pub rules: Rules,
    pub service: Service,
    pub headers: Headers,
    pub admin: Admin,
    pub metrics: Metrics,
    pub rlqs: Rlqs,
    pub stats: Stats,
    pub tracing: Tracing,
    pub log: Log,
}

/// The check ports and how long a client may take.
#[derive(Clone, Debug)]
pub struct Listen {
    /// `/v1/check`, `/json`, health, metrics.
    pub http: SocketAddr,
    /// `ShouldRateLimit`, gRPC health.
    pub grpc: SocketAddr,
    /// How long an HTTP client may take to send its first byte, then its headers, then
    /// its whole body (each).
    pub header_read_timeout: Duration,
    /// The longest a gRPC call may take, its request body included; a shorter
    /// `grpc-timeout` from the caller wins.
    pub grpc_request_timeout: Duration,
    /// A connection with no request in flight for this long is closed (HTTP/2: GOAWAY
    /// first); zero: never.
    pub idle_timeout: Duration,
    /// Connections each listener keeps open at once; one more is closed as soon as it
    /// is accepted. `None`: no cap but the file descriptor limit.
    pub max_connections: Option<usize>,
    /// How long requests in flight may take to finish on shutdown.
    pub drain_timeout: Duration,
    /// A connection older than this (less up to a tenth, at random) is asked to go
    /// away (HTTP/2 GOAWAY; HTTP/1 `Connection: close`); zero: never.
    pub max_connection_age: Duration,
    /// How long the calls in flight on a connection asked to go away may take.
    pub max_connection_age_grace: Duration,
    /// gRPC on this Unix socket as well (`GRPC_UDS`).
    pub grpc_uds: Option<PathBuf>,
}

/// TLS on the service's own listeners.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// The served certificate chain and key (PEM).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Client certificates from these CAs are required: mutual TLS.
    pub client_ca: Option<PathBuf>,
    /// A client certificate must name one of these among its SANs.
    pub client_sans: Vec<String>,
    /// Which listeners serve TLS; `None`: gRPC and HTTP when a certificate is given.
    pub listeners: Option<TlsListeners>,
}

/// Where the rules come from: policy files, or an xDS server.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    /// A policy file or directory.
    pub path: PathBuf,
    /// Candidate policies decided in shadow beside the live ones.
    pub candidate: Option<PathBuf>,
    /// Where the memory store's overrides are kept (by default beside `path`).
    pub overrides_file: Option<PathBuf>,
    /// Reload policy files (and the candidate's) when they change.
    pub watch: bool,
    /// Files that declare one domain make one domain (`MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// Not ready while no domain is loaded.
    pub ready_needs_a_domain: bool,
    /// Rules over xDS; used when `xds.server` is set.
    pub xds: Xds,
}

/// How decisions are answered, service-wide.
#[derive(Clone, Debug, Default)]
pub struct Service {
    /// Never answer OVER_LIMIT overall (`SHADOW_MODE`).
    pub shadow_mode: bool,
    /// Every reference rule is quota-mode (`QUOTA_MODE`).
    pub quota_mode: bool,
    pub near_limit_ratio: f64,
    /// A request that one reference rule denies charges only the rules it is over.
    pub stop_increment_when_over_limit: bool,
    /// Responses carry the request and the passing rules' `metadata`.
    pub dynamic_metadata: bool,
    /// The most store work one request may ask for (`spillway_core::work`).
    pub max_request_work: u64,
    /// The most answers held for their waits at once (a rule's `max_wait`), every API
    /// together; past it a request that would wait is refused.
    pub max_waiters: usize,
    /// Where budget alerts are POSTed (`alert_webhook`); `None`: counted, not sent.
    pub alert_webhook: Option<String>,
    /// The most budget alerts waiting for the webhook (`alert_queue`).
    pub alert_queue: usize,
    /// The runtime's worker threads (`worker_threads`); `None`: tokio's choice, one per
    /// CPU the process may use (a cgroup's quota counted) or `TOKIO_WORKER_THREADS`.
    pub worker_threads: Option<usize>,
    /// What a caller of the gRPC listener may ask beyond its descriptors.
    pub grpc_callers: Callers,
    /// What a caller of the HTTP listener (`/v1/check`, `/json`) may ask.
    pub http_callers: Callers,
}

/// What the callers of one listener may ask beyond their descriptors: their own limit
/// in place of a rule's, and a cost. Anyone who reaches a check port can spend anyone's
/// capacity (`docs/service.md`, "Who may call"); these bound what one request can do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Callers {
    pub overrides: Overrides,
    /// The most hits (cost) one descriptor may ask for; more is refused. `None`: up to
    /// 2^53, the service's own bound.
    pub max_hits: Option<u64>,
}

/// A request's own limit (Envoy's per-descriptor `limit`, `/v1/check`'s `limit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overrides {
    /// Used in place of the configured rule, as the reference does.
    #[default]
    Allow,
    /// Dropped: the configured rule decides.
    Ignore,
    /// The request is refused (HTTP 400, gRPC `INVALID_ARGUMENT`).
    Refuse,
}

impl std::str::FromStr for Overrides {
    type Err = String;
    fn from_str(s: &str) -> Result<Overrides, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "allow" => Ok(Overrides::Allow),
            "ignore" => Ok(Overrides::Ignore),
            "refuse" => Ok(Overrides::Refuse),
            other => Err(format!("`{other}` is not allow, ignore or refuse")),
        }
    }
}

/// Which rate limit headers answers carry.
#[derive(Clone, Debug)]
pub struct Headers {
    /// `/v1/check`'s headers.
    pub style: HeaderStyle,
    /// The reference's `LIMIT_RESPONSE_HEADERS_ENABLED`: `response_headers_to_add` in
    /// gRPC and `/json` answers, with these header names (limit, remaining, reset).
    pub reference: Option<[String; 3]>,
}

impl Default for Headers {
    fn default() -> Headers {
        Headers {
            style: HeaderStyle::Ietf,
            reference: None,
        }
    }
}

/// The admin listener: the console, top keys, config, explain, `/rlconfig`.
#[derive(Clone, Debug, Default)]
pub struct Admin {
    /// `None`: off.
    pub addr: Option<SocketAddr>,
    /// With it, the admin listener answers 401 (health aside) to a request without it.
    pub token: Option<spillway_redis::Password>,
    /// Names it answers to besides IP addresses and `localhost` (its `Host` and a
    /// browser's `Origin`): anything else is refused, against DNS rebinding.
    pub hosts: Vec<String>,
    /// Serve the console page at `/ui`.
    pub ui: bool,
}

/// A listener of its own for Prometheus (`/metrics` stays on the HTTP and admin
/// listeners too).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub addr: Option<SocketAddr>,
    pub path: String,
}

/// The reference's stats (`ratelimit.service.rate_limit.<domain>.<path>.total_hits`
/// The Rate Limit Quota Service's assignments (`rlqs_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rlqs {
    /// How long an assignment lives without renewal (whole seconds: Envoy 1.40 reads
    /// no fraction). Each report renews its buckets' (Envoy reports every 5 s), so it
    /// outlives a lost report or two; a stopped Envoy's share goes to the others after
    /// it.
    pub ttl: Duration,
    /// A bucket an Envoy reports with no request for this long is abandoned: Envoy
    /// forgets it (and its share goes to the others) until a request comes again.
    pub abandon_after: Duration,
    /// The most buckets one stream may hold; a report's buckets past them get no
    /// answer (Envoy's `no_assignment_behavior` applies to them).
    pub max_buckets: usize,
    /// On shutdown, send every assignment again with a TTL of 0 before the streams end:
    /// Envoy then runs its `expired_assignment_behavior` at once, rather than the
    /// assignments until their TTL.
    pub expire_on_shutdown: bool,
    /// The most RLQS streams open at once (every connection's); one past them is
    /// refused `RESOURCE_EXHAUSTED`. A connection carries at most
    /// `listen::MAX_CONCURRENT_STREAMS` of them.
    pub max_streams: usize,
    /// What a bucket no rule matches is sent.
    pub unmatched: Unmatched,
    /// How long one call booking shares in Redis may take (RLQS's own connection,
    /// timeout and breaker: never the decisions').
    pub store_timeout: Duration,
}

/// What an RLQS bucket no rule matches (an unknown domain, a pair the policy does
/// not know) is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unmatched {
    /// No answer: Envoy's own `no_assignment_behavior` decides (it cannot override an
    /// Envoy configured to deny).
    #[default]
    NoAnswer,
    /// `ALLOW_ALL`, for the assignment's TTL.
    Allow,
    /// `DENY_ALL`, for the assignment's TTL.
    Deny,
}

/// and the rest, counted in hits as the reference counts them): as Prometheus series
/// through a statsd_exporter mapping, and to statsd.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// `/metrics` also serves the reference's series, as its in-process exporter
    /// names them (`ratelimit_service_rate_limit_total_hits{domain,key1,key2}`, ...).
    pub reference_metrics: bool,
    /// A statsd_exporter mapping file in place of the reference's default mapping
    /// (`PROMETHEUS_MAPPER_YAML`).
    pub mapper: Option<PathBuf>,
    /// Where statsd lines go (`host:port`); `None`: nowhere.
    pub statsd: Option<String>,
    /// Over TCP (the reference's default) rather than UDP.
    pub statsd_tcp: bool,
    /// DogStatsD: tags as `|#k:v`, not in the name (`USE_DOG_STATSD`).
    pub dogstatsd: bool,
    /// DogStatsD renames (`USE_DOG_STATSD_MOGRIFIERS`), the first that matches wins.
    pub mogrifiers: Vec<Mogrifier>,
    /// Tags on every stat (`EXTRA_TAGS`).
    pub tags: Vec<(String, String)>,
    /// How often counters and gauges go to statsd (`STATS_FLUSH_INTERVAL`).
    pub flush_interval: Duration,
}

/// A DogStatsD rename: a stat whose name matches `pattern` is sent as `name` with
/// `tags`, each of which may use the match's groups (`$1`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Mogrifier {
    pub pattern: String,
    pub name: String,
    #[serde(default)]
    pub tags: Vec<(String, String)>,
}

/// A span per decision, exported over OTLP (`TRACING_ENABLED`).
#[derive(Clone, Debug, Default)]
pub struct Tracing {
    /// Where spans go (HTTP: the whole URL, `…/v1/traces`); `None`: no tracing.
    pub endpoint: Option<String>,
    pub protocol: OtlpProtocol,
    /// The share of traces kept when the caller's `traceparent` does not say (0–1).
    pub sampling_rate: f64,
    pub service_name: String,
    pub service_namespace: Option<String>,
    pub service_instance_id: Option<String>,
}

/// How spans are sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (the reference's default).
    #[default]
    Http,
    /// OTLP/gRPC.
    Grpc,
}

/// Logging.
#[derive(Clone, Debug, Default)]
pub struct Log {
    /// `error`, `warn`, `info`, `debug`, `trace` (or a `tracing` filter).
    pub level: String,
    pub json: bool,
    /// ANSI colours in text logs; `None`: when stderr is a terminal.
    pub color: Option<bool>,
}

/// A setting that could not be used; says which, from where, and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Default for Config {
    /// Every setting at its default (the rows' own).
    fn default() -> Config {
        Partial::defaults(Profile::Native)
            .build()
            .expect("every default parses (tested)")
    }
}

impl Config {
    /// Where the memory store keeps overrides: `overrides_file` (`off`: nowhere, `None`),
    /// else beside the policies (`policies.yaml` or the directory `policies`:
    /// `policies.overrides.ndjson` next to it, never inside a directory the loader reads).
    pub fn overrides_file(&self) -> Option<PathBuf> {
        if let Some(path) = &self.rules.overrides_file {
            return (path.as_os_str() != "off").then(|| path.clone());
        }
        let policies = &self.rules.path;
        let stem = if policies.is_dir() {
            policies.file_name()
        } else {
            policies.file_stem()
        };
        let name = format!(
            "{}.overrides.ndjson",
            stem.map_or("policies".into(), |s| s.to_string_lossy())
        );
        Some(policies.with_file_name(name))
    }

    /// How policy files are read.
    pub fn load_options(&self) -> spillway_policy::LoadOptions {
        spillway_policy::LoadOptions {
            merge_domains: self.rules.merge_domains,
        }
    }

    /// The defaults with the policies at `path` and every listener on loopback at a
    /// port the OS picks: where a test or an embedding program starts.
    pub fn ephemeral(path: impl Into<PathBuf>) -> Config {
        let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut c = Config::default();
        c.rules.path = path.into();
        c.listen.http = any_port;
        c.listen.grpc = any_port;
        c.admin.addr = Some(any_port);
        c
    }

    /// The xDS settings, when the rules come over xDS.
    pub fn xds(&self) -> Option<&Xds> {
        self.rules.xds.server.as_ref().map(|_| &self.rules.xds)
    }
}

#[cfg(test)]
pub(crate) mod tests;
