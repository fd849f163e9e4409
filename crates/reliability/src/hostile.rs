//! Hostile input: every malformed request class, on `/v1/check`, the reference's
//! `/json` and gRPC `ShouldRateLimit`, sent to a real service on a real Redis. Each
//! must get a 4xx (gRPC `INVALID_ARGUMENT`) saying what is wrong, never a panic, never
//! a 5xx, and never reach Redis: store calls are counted by Redis itself
//! (`INFO commandstats`), so a valid control request proves the count works.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prost::Message;
use serde_json::json;
use spillway_testkit::redis::RedisServer;

use crate::Policy;
use crate::trial::service_settings;

/// Where a case is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/check`.
    Check,
    /// The reference's `POST /json`.
    Json,
    /// gRPC `ShouldRateLimit`, the bytes framed as they are (so they need not decode).
    Grpc,
}

/// One request: what it is, where it goes, its body, and whether it is valid (the
/// control, which must reach the store).
#[derive(Clone, Debug)]
pub struct Case {
    pub class: String,
    pub api: Api,
    pub body: Vec<u8>,
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
        self.status.starts_with('4') || self.status == "3 INVALID_ARGUMENT"
    }
}

/// The classes, on every API. Domain `reliability`, descriptor key `user` (the rule of
/// [`Policy::yaml`]).
pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut check = |class: &str, body: serde_json::Value| {
        cases.push(Case {
            class: class.into(),
            api: Api::Check,
            body: body.to_string().into_bytes(),
            valid: false,
        })
    };
    let one = |value: &str| json!([{ "entries": [{ "key": "user", "value": value }] }]);
    let many = |n: usize| -> Vec<_> { (0..n).map(|i| one(&i.to_string())[0].clone()).collect() };
    let domain = "reliability";
    check(
        "empty domain",
        json!({ "domain": "", "descriptors": one("a") }),
    );
    check(
        "domain of 300 bytes",
        json!({ "domain": "d".repeat(300), "descriptors": one("a") }),
    );
    check(
        "no descriptors",
        json!({ "domain": domain, "descriptors": [] }),
    );
    check(
        "65 descriptors (limit 64)",
        json!({ "domain": domain, "descriptors": many(65) }),
    );
    check(
        "10,000 descriptors",
        json!({ "domain": domain, "descriptors": many(10_000) }),
    );
    let entries: Vec<_> = (0..33).map(|i| json!({ "key": format!("k{i}") })).collect();
    check(
        "33 entries in a descriptor (limit 32)",
        json!({ "domain": domain, "descriptors": [{ "entries": entries }] }),
    );
    check(
        "empty key",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "" }] }] }),
    );
    check(
        "value of 2,000 bytes (limit 1,024)",
        json!({ "domain": domain, "descriptors": one(&"v".repeat(2000)) }),
    );
    check(
        "value of 1 MiB (body over 64 KiB)",
        json!({ "domain": domain, "descriptors": one(&"v".repeat(1 << 20)) }),
    );
    check(
        "cost 2^53 + 1",
        json!({ "domain": domain, "descriptors": one("a"), "cost": 9_007_199_254_740_993_u64 }),
    );
    check(
        "cost 2^64 - 1",
        json!({ "domain": domain, "descriptors": one("a"), "cost": u64::MAX }),
    );
    check(
        "descriptor cost 2^64 - 1",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "cost": u64::MAX }] }),
    );
    check(
        "override unit `fortnight`",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "limit": { "requests_per_unit": 1, "unit": "fortnight" } }] }),
    );
    check(
        "unknown field",
        json!({ "domain": domain, "descriptors": one("a"), "surprise": 1 }),
    );
    check(
        "domain of the wrong type",
        json!({ "domain": 5, "descriptors": one("a") }),
    );
    let raw = |class: &str, api: Api, body: &[u8]| Case {
        class: class.into(),
        api,
        body: body.to_vec(),
        valid: false,
    };
    // Deep nesting where a value is expected: a recursive parser must stop, not overflow.
    let deep = [
        &br#"{"domain":"reliability","descriptors":"#[..],
        &[b'['; 30_000],
        &[b']'; 30_000],
        b"}",
    ]
    .concat();
    let prefix = br#"{"domain":"reliability","descriptors":[{"entries":[{"key":"user","value":"a"}]}],"cost":"#;
    for (class, cost) in [
        ("cost -1", "-1"),
        ("cost NaN", "NaN"),
        ("cost 1e300", "1e300"),
        ("cost 1.5", "1.5"),
    ] {
        cases.push(raw(
            class,
            Api::Check,
            &[&prefix[..], cost.as_bytes(), b"}"].concat(),
        ));
    }
    cases.push(raw("not JSON", Api::Check, b"not json"));
    cases.push(raw("empty body", Api::Check, b""));
    cases.push(raw("non-UTF-8 bytes in a value", Api::Check, b"{\"domain\":\"reliability\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"\xff\xfe\"}]}]}"));
    cases.push(raw(
        "lone UTF-16 surrogate in a key",
        Api::Check,
        br#"{"domain":"reliability","descriptors":[{"entries":[{"key":"\udc00"}]}]}"#,
    ));
    cases.push(raw("JSON nested 30,000 deep", Api::Check, &deep));
    cases.push(Case {
        class: "control: a valid request".into(),
        api: Api::Check,
        body: json!({ "domain": domain, "descriptors": one("control") })
            .to_string()
            .into_bytes(),
        valid: true,
    });

    let mut json_api = |class: &str, body: serde_json::Value| {
        cases.push(raw(class, Api::Json, body.to_string().as_bytes()))
    };
    json_api("domain of the wrong type", json!({ "domain": 5 }));
    json_api(
        "hitsAddend -1",
        json!({ "domain": domain, "descriptors": one("a"), "hitsAddend": -1 }),
    );
    json_api(
        "hitsAddend 2^40 (over 32 bits)",
        json!({ "domain": domain, "descriptors": one("a"), "hitsAddend": 1_u64 << 40 }),
    );
    json_api(
        "unit 99",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "limit": { "requestsPerUnit": 1, "unit": 99 } }] }),
    );
    json_api(
        "unknown field",
        json!({ "domain": domain, "descriptors": one("a"), "surprise": 1 }),
    );
    json_api(
        "65 descriptors",
        json!({ "domain": domain, "descriptors": many(65) }),
    );
    cases.push(raw("not JSON", Api::Json, b"\xff\xfe not json"));
    cases.push(raw("JSON nested 30,000 deep", Api::Json, &deep));
    cases.push(Case {
        class: "control: a valid request".into(),
        api: Api::Json,
        body: json!({ "domain": domain, "descriptors": one("control") })
            .to_string()
            .into_bytes(),
        valid: true,
    });

    let request = |descriptors: Vec<RateLimitDescriptor>| RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    };
    let descriptor = |value: &str| RateLimitDescriptor {
        entries: vec![Entry {
            key: "user".into(),
            value: value.into(),
        }],
        ..Default::default()
    };
    let mut grpc =
        |class: &str, r: RateLimitRequest| cases.push(raw(class, Api::Grpc, &r.encode_to_vec()));
    grpc(
        "empty domain",
        RateLimitRequest {
            domain: String::new(),
            ..request(vec![descriptor("a")])
        },
    );
    grpc(
        "domain of 300 bytes",
        RateLimitRequest {
            domain: "d".repeat(300),
            ..request(vec![descriptor("a")])
        },
    );
    grpc("no descriptors", request(vec![]));
    grpc(
        "65 descriptors (limit 64)",
        request((0..65).map(|i| descriptor(&i.to_string())).collect()),
    );
    grpc(
        "10,000 descriptors (message over 64 KiB)",
        request((0..10_000).map(|i| descriptor(&i.to_string())).collect()),
    );
    grpc(
        "empty key",
        request(vec![RateLimitDescriptor {
            entries: vec![Entry::default()],
            ..Default::default()
        }]),
    );
    grpc(
        "value of 2,000 bytes",
        request(vec![descriptor(&"v".repeat(2000))]),
    );
    grpc(
        "override unit 99",
        request(vec![RateLimitDescriptor {
            limit: Some(RateLimitOverride {
                requests_per_unit: 1,
                unit: 99,
            }),
            ..descriptor("a")
        }]),
    );
    // Field 1 (domain), length 2, bytes that are not UTF-8.
    cases.push(raw(
        "non-UTF-8 domain",
        Api::Grpc,
        &[0x0a, 0x02, 0xff, 0xfe],
    ));
    cases.push(raw(
        "malformed protobuf",
        Api::Grpc,
        &[0xff, 0xff, 0xff, 0xff, 0x0f, 0x12],
    ));
    cases.push(raw("truncated varint", Api::Grpc, &[0x18, 0xff]));
    cases.push(raw("length past the end", Api::Grpc, &[0x0a, 0x7f, b'a']));
    cases.push(Case {
        class: "control: a valid request".into(),
        api: Api::Grpc,
        body: request(vec![descriptor("control")]).encode_to_vec(),
        valid: true,
    });
    cases
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

/// Every case against a fresh service on a Redis of its own.
pub async fn run() -> anyhow::Result<(Vec<Outcome>, usize)> {
    count_panics();
    let panics_before = PANICS.load(Ordering::SeqCst);
    let redis = tokio::task::spawn_blocking(RedisServer::start).await?;
    let settings = service_settings("hostile", Policy::Closed, redis.url())?;
    let running = spillway_server::start(&settings).await?;
    let sender = Sender::new(running.http_addr, running.grpc_addr)?;
    let mut outcomes = Vec::new();
    for case in cases() {
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
    running.stop().await;
    let _ = std::fs::remove_dir_all(&settings.config);
    Ok((outcomes, PANICS.load(Ordering::SeqCst) - panics_before))
}

/// `EVALSHA` and `EVAL` calls the server has run (`INFO commandstats`).
async fn script_calls(url: &str) -> anyhow::Result<u64> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await?;
    Ok(info
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

struct Sender {
    http: reqwest::Client,
    h2: Client<HttpConnector, Full<Bytes>>,
    http_addr: std::net::SocketAddr,
    grpc_addr: std::net::SocketAddr,
}

impl Sender {
    fn new(
        http_addr: std::net::SocketAddr,
        grpc_addr: std::net::SocketAddr,
    ) -> anyhow::Result<Sender> {
        Ok(Sender {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()?,
            h2: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
            http_addr,
            grpc_addr,
        })
    }

    /// Status, message, and whether it is a server fault.
    async fn send(&self, case: &Case) -> (String, String, bool) {
        match case.api {
            Api::Check | Api::Json => {
                let path = if case.api == Api::Check {
                    "/v1/check"
                } else {
                    "/json"
                };
                let sent = self
                    .http
                    .post(format!("http://{}{path}", self.http_addr))
                    .header("content-type", "application/json")
                    .body(case.body.clone())
                    .send()
                    .await;
                let Ok(r) = sent else {
                    return ("no answer".into(), String::new(), true);
                };
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                let error = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["error"]["message"].as_str().map(String::from));
                let fault =
                    status.is_server_error() || (status.is_client_error() && error.is_none());
                (
                    status.as_u16().to_string(),
                    error.unwrap_or_default(),
                    fault,
                )
            }
            Api::Grpc => self.grpc(&case.body).await,
        }
    }

    async fn grpc(&self, message: &[u8]) -> (String, String, bool) {
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
        let code: i32 = headers
            .get("grpc-status")
            .and_then(|s| s.to_str().ok()?.parse().ok())
            .unwrap_or(-1);
        let message = headers
            .get("grpc-message")
            .and_then(|m| m.to_str().ok())
            .map(|m| m.replace("%20", " "))
            .unwrap_or_default();
        let fault = !matches!(code, 0 | 3 | 8);
        (format!("{code} {}", grpc_name(code)), message, fault)
    }
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
        let api = match self.api {
            Api::Check => "`/v1/check`",
            Api::Json => "`/json`",
            Api::Grpc => "gRPC",
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

/// Slow clients, each holding a connection open in its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slow {
    /// Sends nothing at all.
    Silent,
    /// Sends half a request's headers, then nothing.
    HalfHeaders,
    /// Sends the headers of a 100-byte body, and 10 bytes of it.
    HalfBody,
}

impl Slow {
    pub const ALL: [Slow; 3] = [Slow::Silent, Slow::HalfHeaders, Slow::HalfBody];

    fn bytes(self) -> &'static [u8] {
        match self {
            Slow::Silent => b"",
            Slow::HalfHeaders => b"POST /v1/check HTTP/1.1\r\nHost: x\r\n",
            Slow::HalfBody => {
                b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                  Content-Length: 100\r\n\r\n{\"domain\":"
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Slow::Silent => "connect, send nothing",
            Slow::HalfBody => "headers, 10 of 100 body bytes",
            Slow::HalfHeaders => "half the headers",
        }
    }
}

/// What `n` slow clients of each kind did to the service.
#[derive(Clone, Debug)]
pub struct SlowReport {
    pub kind: Slow,
    pub held: usize,
    /// Closed by the server within the wait, and when the last of those was.
    pub closed: usize,
    pub last_closed: Option<Duration>,
}

/// Holds `n` connections of every [`Slow`] kind to a service on the memory store with
/// a `header_read` timeout, asks one valid request meanwhile (its answer and latency
/// are returned), and waits `header_read` + 2 s for the server to close them.
pub async fn slow_clients(
    n: usize,
    header_read: Duration,
) -> anyhow::Result<(Vec<SlowReport>, crate::load::Answer, Duration)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut settings = service_settings("slow", Policy::Closed, "memory".into())?;
    settings.header_read_timeout = header_read;
    let running = spillway_server::start(&settings).await?;
    let addr = running.http_addr;
    let wait = header_read + Duration::from_secs(2);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for kind in Slow::ALL {
        for _ in 0..n {
            let mut conn = tokio::net::TcpStream::connect(addr).await?;
            conn.write_all(kind.bytes()).await?;
            tasks.push((
                kind,
                tokio::spawn(async move {
                    let mut sink = Vec::new();
                    tokio::time::timeout(wait, conn.read_to_end(&mut sink))
                        .await
                        .ok()
                        .map(|_| start.elapsed())
                }),
            ));
        }
    }
    let check = crate::load::HttpCheck::new(addr, "patient")?;
    let asked = tokio::time::Instant::now();
    let answer = check.call().await;
    let latency = asked.elapsed();
    let mut reports: Vec<SlowReport> = Slow::ALL
        .iter()
        .map(|&kind| SlowReport {
            kind,
            held: n,
            closed: 0,
            last_closed: None,
        })
        .collect();
    for (kind, task) in tasks {
        if let Some(at) = task.await? {
            let r = reports
                .iter_mut()
                .find(|r| r.kind == kind)
                .expect("every kind");
            r.closed += 1;
            r.last_closed = r.last_closed.max(Some(at));
        }
    }
    running.stop().await;
    let _ = std::fs::remove_dir_all(&settings.config);
    Ok((reports, answer, latency))
}

impl fmt::Display for SlowReport {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "| {} | {} | {} | {} |",
            self.kind.name(),
            self.held,
            self.closed,
            self.last_closed
                .map_or("—".into(), |d| format!("{:.1} s", d.as_secs_f64()))
        )
    }
}

/// The table's header, for [`SlowReport`]'s rows.
pub const SLOW_HEADER: &str =
    "| slow client | connections | closed by the server | last closed after |\n|---|---|---|---|";

/// A policy file that must not load, and what became of it.
#[derive(Clone, Debug)]
pub struct ConfigOutcome {
    pub class: &'static str,
    /// The load error's first line; `None` if it loaded.
    pub error: Option<String>,
    pub panicked: bool,
    pub took: Duration,
}

/// Broken policy files of every kind, each loaded from disk as `serve` and `validate`
/// load them.
pub fn config_cases() -> Vec<(&'static str, Vec<u8>)> {
    let nested = |depth: usize| -> Vec<u8> {
        let mut s = String::from("domain: d\ndescriptors: ");
        s.push_str(&"[{key: k, descriptors: ".repeat(depth));
        s.push_str("[]");
        s.push_str(&"}]".repeat(depth));
        s.into_bytes()
    };
    // Each level lists the previous one ten times: 10^9 descriptors once expanded.
    let laughs = {
        let mut s = String::from("domain: d\ndescriptors:\n  - &a0 {key: k0}\n");
        for i in 1..10 {
            let prev = vec![format!("*a{}", i - 1); 10].join(", ");
            s.push_str(&format!("  - &a{i} {{key: k{i}, descriptors: [{prev}]}}\n"));
        }
        s.into_bytes()
    };
    let rule = |r: &str| format!("domain: d\ndescriptors:\n  - key: k\n{r}").into_bytes();
    vec![
        ("empty file", Vec::new()),
        ("not YAML", b"domain: d\n  descriptors: : :\n\t- [".to_vec()),
        ("not UTF-8", b"domain: \xff\xfe\ndescriptors: []\n".to_vec()),
        ("binary garbage", (0..=255u8).cycle().take(4096).collect()),
        ("domain of the wrong type", b"domain: [1, 2]\n".to_vec()),
        ("no domain", b"descriptors: []\n".to_vec()),
        ("empty domain", b"domain: ''\n".to_vec()),
        ("unknown field", b"domain: d\nbogus: 1\n".to_vec()),
        ("duplicate key", b"domain: d\ndomain: e\n".to_vec()),
        (
            "unknown unit",
            rule("    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"),
        ),
        (
            "negative requests_per_unit",
            rule("    rate_limit: {unit: second, requests_per_unit: -1}\n"),
        ),
        (
            "requests_per_unit 2^64",
            rule("    rate_limit: {unit: second, requests_per_unit: 18446744073709551616}\n"),
        ),
        (
            "empty descriptor key",
            b"domain: d\ndescriptors:\n  - key: ''\n".to_vec(),
        ),
        (
            "unknown algorithm",
            rule("    limits:\n      - {algorithm: leaky, limit: 1, window: 1s}\n"),
        ),
        (
            "window 0",
            rule("    limits:\n      - {algorithm: gcra, limit: 1, window: 0s}\n"),
        ),
        (
            "limit 0 on sliding_log",
            rule("    limits:\n      - {algorithm: sliding_log, limit: 0, window: 1s}\n"),
        ),
        (
            "window `soon`",
            rule("    limits:\n      - {algorithm: fixed_window, limit: 1, window: soon}\n"),
        ),
        (
            "precision 0",
            rule(
                "    limits:\n      - {algorithm: sliding_window, limit: 1, window: 1s, precision: 0}\n",
            ),
        ),
        (
            "both rate_limit and limits",
            rule(
                "    rate_limit: {unit: second, requests_per_unit: 1}\n    limits:\n      - {algorithm: gcra, limit: 1, window: 1s}\n",
            ),
        ),
        ("descriptors nested 10,000 deep", nested(10_000)),
        (
            "a billion laughs (aliases expanding to 10^9 descriptors)",
            laughs,
        ),
    ]
}

/// Loads every [`config_cases`] file from a scratch directory.
pub fn run_config() -> anyhow::Result<Vec<ConfigOutcome>> {
    count_panics();
    let dir = std::env::temp_dir().join(format!("spillway-hostile-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut outcomes = Vec::new();
    for (class, bytes) in config_cases() {
        let file = dir.join("p.yaml");
        std::fs::write(&file, bytes)?;
        #[allow(clippy::disallowed_methods, reason = "timing a blocking load")]
        let started = std::time::Instant::now();
        let loaded = std::panic::catch_unwind(|| spillway_policy::load(&file));
        outcomes.push(ConfigOutcome {
            class,
            error: match &loaded {
                Ok(Err(e)) => Some(
                    e.to_string()
                        .lines()
                        .next()
                        .unwrap_or("")
                        .replace(&format!("{}/", dir.display()), ""),
                ),
                _ => None,
            },
            panicked: loaded.is_err(),
            took: started.elapsed(),
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(outcomes)
}

impl ConfigOutcome {
    /// Refused with an error, no panic, within a second.
    pub fn ok(&self) -> bool {
        self.error.is_some() && !self.panicked && self.took < Duration::from_secs(1)
    }
}

impl fmt::Display for ConfigOutcome {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = match (&self.error, self.panicked) {
            (_, true) => "**panicked**".to_string(),
            (None, _) => "**loaded**".to_string(),
            (Some(e), _) => {
                let mut short: String = e.chars().take(100).collect();
                if short.len() < e.len() {
                    short.push('…');
                }
                format!("`{}`", short.replace('`', "'").replace('|', "\\|"))
            }
        };
        write!(
            f,
            "| {} | {error} | {:.1} | {} |",
            self.class,
            self.took.as_secs_f64() * 1e3,
            if self.ok() { "yes" } else { "**no**" }
        )
    }
}

/// The table's header, for [`ConfigOutcome`]'s rows.
pub const CONFIG_HEADER: &str = "| policy file | load error | ms | as it must |\n|---|---|---|---|";
