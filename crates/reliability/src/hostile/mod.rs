//! Hostile input: every malformed request class, on `/v1/check`, the reference's
//! `/json` and gRPC `ShouldRateLimit`, sent to a real service on a real Redis. Each
//! must get a 4xx (gRPC `INVALID_ARGUMENT`) saying what is wrong, never a panic, never
//! a 5xx, and never reach Redis: store calls are counted by Redis itself
//! (`INFO commandstats`), so a valid control request proves the count works.

mod boundary;
mod cases;
mod config;
mod h2;
mod holds;
mod lies;
mod reserve;
mod rlqs;
mod slow;
mod tls;
mod xds;

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use spillway_testkit::redis::RedisServer;

pub use boundary::boundary_cases;
pub use cases::cases;
pub use config::{CONFIG_HEADER, ConfigOutcome, config_cases, run_config};
pub use h2::{H2_HEADER, H2Case, H2Report, MAX_CONNECTIONS, h2_clients};
pub use holds::holds_cases;
pub use lies::{LIES_HEADER, LieOutcome, lies};
pub use reserve::reserve_cases;
pub use rlqs::rlqs_cases;
pub use slow::{SLOW_HEADER, Slow, SlowReport, slow_clients};
pub use tls::{TLS_HEADER, TlsCase, TlsReport, tls_clients};
pub use xds::{XDS_HEADER, XdsOutcome, xds_pushes};

use crate::Policy;
use crate::trial::service_settings;

/// Where a case is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/check`.
    Check,
    /// The reference's `POST /json`.
    Json,
    /// `POST /v1/reserve`.
    Reserve,
    /// `POST /v1/commit`.
    Commit,
    /// `POST /v1/acquire`.
    Acquire,
    /// `POST /v1/release`.
    Release,
    /// `POST /v1/renew`.
    Renew,
    /// gRPC `ShouldRateLimit`, the bytes framed as they are (so they need not decode).
    Grpc,
    /// The admin listener: this method on this path (a body is sent when there is one).
    Admin(&'static str, &'static str),
    /// A Rate Limit Quota Service stream: the body sent as one message, then
    /// half-closed.
    Rlqs,
}

/// One request: what it is, where it goes, its body, its headers beside the usual
/// ones, and whether it is valid (the control, which must reach the store).
#[derive(Clone, Debug)]
pub struct Case {
    pub class: String,
    pub api: Api,
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
    pub valid: bool,
}

/// What a case got.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub class: String,
    pub api: Api,
    /// The HTTP status, or the gRPC status code.
    pub status: String,
    /// The error message the caller was given.
    pub message: String,
    /// A server fault: 5xx, a gRPC code other than OK / INVALID_ARGUMENT /
    /// RESOURCE_EXHAUSTED, no answer at all, or (HTTP) an error body that is not JSON.
    pub server_fault: bool,
    /// Script calls Redis counted while the case ran.
    pub store_calls: u64,
    pub valid: bool,
}

impl Outcome {
    /// Whether the case went as it must.
    pub fn ok(&self) -> bool {
        !self.server_fault && (self.store_calls > 0) == self.valid && self.refused() != self.valid
    }

    fn refused(&self) -> bool {
        self.status.starts_with('4')
            || self.status == "3 INVALID_ARGUMENT"
            || self.status == "8 RESOURCE_EXHAUSTED"
            // An RLQS bucket that got no assignment.
            || self.status == "0 OK, 0 answered"
    }
}

/// Panics anywhere in this process since [`count_panics`] was called.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts every panic (the service runs in this process), then reports it as usual.
pub fn count_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        report(info);
    }));
}

/// Panics counted since [`count_panics`] was first called.
pub fn panics_so_far() -> usize {
    PANICS.load(Ordering::SeqCst)
}

/// Every case against a fresh service on a Redis of its own.
pub async fn run() -> anyhow::Result<(Vec<Outcome>, usize)> {
    count_panics();
    let panics_before = PANICS.load(Ordering::SeqCst);
    let redis = tokio::task::spawn_blocking(RedisServer::start).await?;
    let settings = service_settings("hostile", Policy::Closed, redis.url())?;
    // A rule as heavy as a rule gets: a request of 64 descriptors on it is past any
    // request's budget of store work (`max_request_work`).
    std::fs::write(
        settings.rules.path.join("heavy.yaml"),
        boundary::HEAVY_POLICY,
    )?;
    std::fs::write(
        settings.rules.path.join("metered.yaml"),
        reserve::METERED_POLICY,
    )?;
    std::fs::write(settings.rules.path.join("holds.yaml"), holds::HOLDS_POLICY)?;
    std::fs::write(settings.rules.path.join("quota.yaml"), rlqs::RLQS_POLICY)?;
    let running = crate::trial::start(settings.clone()).await?;
    let sender = Sender::new(&running)?;
    let mut outcomes = Vec::new();
    for case in cases()
        .into_iter()
        .chain(boundary_cases())
        .chain(reserve_cases())
        .chain(holds_cases())
        .chain(rlqs_cases())
    {
        let before = script_calls(&redis.url()).await?;
        let (status, message, server_fault) = sender.send(&case).await;
        outcomes.push(Outcome {
            store_calls: script_calls(&redis.url()).await? - before,
            class: case.class,
            api: case.api,
            status,
            message,
            server_fault,
            valid: case.valid,
        });
    }
    let url = redis.url();
    outcomes.push(rlqs::never_reads(&sender, async || script_calls(&url).await.unwrap_or(0)).await);
    running.stop().await;
    let _ = std::fs::remove_dir_all(&settings.rules.path);
    Ok((outcomes, PANICS.load(Ordering::SeqCst) - panics_before))
}

/// `FCALL`, `EVALSHA` and `EVAL` calls the server has run (`INFO commandstats`).
async fn script_calls(url: &str) -> anyhow::Result<u64> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await?;
    Ok(spillway_testkit::redis::script_calls_in(&info))
}

struct Sender {
    http: reqwest::Client,
    h2: Client<HttpConnector, Full<Bytes>>,
    pub(super) http_addr: std::net::SocketAddr,
    grpc_addr: std::net::SocketAddr,
    admin_addr: Option<std::net::SocketAddr>,
}

impl Sender {
    fn new(running: &spillway_server::Running) -> anyhow::Result<Sender> {
        Ok(Sender {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
            h2: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
            http_addr: running.http_addr,
            grpc_addr: running.grpc_addr,
            admin_addr: running.admin_addr,
        })
    }

    /// An HTTP request's status, error message, and whether it is a server fault.
    async fn http(&self, request: reqwest::RequestBuilder, case: &Case) -> (String, String, bool) {
        let mut request = request.body(case.body.clone());
        for (name, value) in &case.headers {
            request = request.header(*name, value);
        }
        let Ok(r) = request.send().await else {
            return ("no answer".into(), String::new(), true);
        };
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        let error = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(String::from));
        let fault = status.is_server_error() || (status.is_client_error() && error.is_none());
        (
            status.as_u16().to_string(),
            error.unwrap_or_default(),
            fault,
        )
    }

    /// Status, message, and whether it is a server fault.
    async fn send(&self, case: &Case) -> (String, String, bool) {
        let path = match case.api {
            Api::Check => "/v1/check",
            Api::Json => "/json",
            Api::Reserve => "/v1/reserve",
            Api::Commit => "/v1/commit",
            Api::Acquire => "/v1/acquire",
            Api::Release => "/v1/release",
            Api::Renew => "/v1/renew",
            Api::Grpc => return self.grpc(&case.body).await,
            Api::Rlqs => return self.rlqs(&case.body).await,
            Api::Admin(method, path) => {
                let Some(admin) = self.admin_addr else {
                    return ("no admin listener".into(), String::new(), true);
                };
                let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
                let request = self.http.request(method, format!("http://{admin}{path}"));
                return self.http(request, case).await;
            }
        };
        let request = self
            .http
            .post(format!("http://{}{path}", self.http_addr))
            .header("content-type", "application/json");
        self.http(request, case).await
    }

    pub(super) async fn grpc(&self, message: &[u8]) -> (String, String, bool) {
        let mut frame = vec![0u8];
        frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
        frame.extend_from_slice(message);
        let req = hyper::Request::post(format!(
            "http://{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            self.grpc_addr
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(frame)))
        .expect("a request");
        let Ok(resp) = self.h2.request(req).await else {
            return ("no answer".into(), String::new(), true);
        };
        // The status is in the headers (trailers-only) or in the trailers.
        let mut headers = resp.headers().clone();
        if let Ok(body) = resp.into_body().collect().await
            && let Some(trailers) = body.trailers()
        {
            headers.extend(trailers.clone());
        }
        let (code, message) = grpc_status(&headers);
        let fault = !matches!(code, 0 | 3 | 8);
        (format!("{code} {}", grpc_name(code)), message, fault)
    }
}

/// A gRPC answer's status code (-1 when none) and message, from its headers and
/// trailers together.
fn grpc_status(headers: &http::HeaderMap) -> (i32, String) {
    let code = (headers.get("grpc-status"))
        .and_then(|s| s.to_str().ok()?.parse().ok())
        .unwrap_or(-1);
    let message = (headers.get("grpc-message"))
        .and_then(|m| m.to_str().ok())
        .map(|m| m.replace("%20", " "))
        .unwrap_or_default();
    (code, message)
}

fn grpc_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        3 => "INVALID_ARGUMENT",
        8 => "RESOURCE_EXHAUSTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        _ => "other",
    }
}

impl fmt::Display for Outcome {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let admin;
        let api = match self.api {
            Api::Check => "`/v1/check`",
            Api::Json => "`/json`",
            Api::Reserve => "`/v1/reserve`",
            Api::Commit => "`/v1/commit`",
            Api::Acquire => "`/v1/acquire`",
            Api::Release => "`/v1/release`",
            Api::Renew => "`/v1/renew`",
            Api::Grpc => "gRPC",
            Api::Rlqs => "RLQS stream",
            Api::Admin(method, path) => {
                admin = format!("admin `{method} {path}`");
                &admin
            }
        };
        let mut message: String = self.message.chars().take(90).collect();
        if message.len() < self.message.len() {
            message.push('…');
        }
        write!(
            f,
            "| {api} | {} | {} | {} | {} | {} |",
            self.class,
            self.status,
            message.replace('|', "\\|"),
            self.store_calls,
            if self.ok() { "yes" } else { "**no**" }
        )
    }
}

/// The table's header, for [`Outcome`]'s rows.
pub const HOSTILE_HEADER: &str =
    "| API | request | answer | message | store calls | as it must |\n|---|---|---|---|---|---|";
