//! Hostile HTTP/2 clients on the gRPC port (issue #37, point 1), in raw frames: streams
//! that announce 4 MiB and stall, tens of thousands of idle connections, the rapid
//! reset, floods of SETTINGS, PING and CONTINUATION frames, a window that overflows or
//! never opens, a 1 MiB header, garbage. Each against a fresh service; a good caller,
//! on a connection of its own, asks after each (and during the long ones); the
//! process's RSS and file descriptors are read before and after.

use std::fmt;
use std::time::Duration;

use std::sync::Arc;

use tokio::time::Instant;

use spillway_server::{App, Config, Running};
use spillway_testkit::tls::{Leaf, Pair, Pki, client_config};

mod play;
mod wire;

use play::run;

use wire::Transport;

/// The gRPC listener's connection cap in these cases.
pub const MAX_CONNECTIONS: usize = 5_000;

/// The cases, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum H2Case {
    /// 200 gRPC streams (four connections of 50: within a connection's first window of
    /// 64 KiB) that announce 4 MiB, send 1 KiB, stall.
    StalledStreams,
    /// Many connections that send the preface and SETTINGS, then nothing, against a
    /// listener of [`MAX_CONNECTIONS`]: those over it are closed at once.
    IdleConnections(usize),
    /// 10,000 streams opened and reset at once (CVE-2023-44487).
    RapidReset,
    /// 10,000 SETTINGS frames.
    SettingsFlood,
    /// 100,000 PINGs, their answers never read.
    PingFlood,
    /// HEADERS without END_HEADERS, then CONTINUATION frames without end
    /// (CVE-2024-27316).
    ContinuationFlood,
    /// A header of 1 MiB.
    HugeHeader,
    /// WINDOW_UPDATE increments that push the window past 2^31 - 1.
    WindowOverflow,
    /// An initial window of 0, then 100 calls whose answers can never be sent.
    ZeroWindow,
    /// The preface, then 64 KiB of garbage.
    GarbageFrames,
    /// A client stream on an even id, then one reusing a closed id.
    BadStreamIds,
}

impl H2Case {
    /// Every case (`idle` connections for the idle one).
    pub fn all(idle: usize) -> Vec<H2Case> {
        vec![
            H2Case::StalledStreams,
            H2Case::IdleConnections(idle),
            H2Case::RapidReset,
            H2Case::SettingsFlood,
            H2Case::PingFlood,
            H2Case::ContinuationFlood,
            H2Case::HugeHeader,
            H2Case::WindowOverflow,
            H2Case::ZeroWindow,
            H2Case::GarbageFrames,
            H2Case::BadStreamIds,
        ]
    }

    fn describe(self) -> String {
        match self {
            H2Case::StalledStreams => {
                "200 gRPC streams announcing 4 MiB, 1 KiB sent, then stalled".into()
            }
            H2Case::IdleConnections(n) => format!(
                "{n} idle connections (preface, SETTINGS, nothing) against max_connections {MAX_CONNECTIONS}"
            ),
            H2Case::RapidReset => "10,000 streams opened and reset (rapid reset)".into(),
            H2Case::SettingsFlood => "10,000 SETTINGS frames".into(),
            H2Case::PingFlood => "100,000 PINGs, answers never read".into(),
            H2Case::ContinuationFlood => "HEADERS then endless CONTINUATION (16 MiB)".into(),
            H2Case::HugeHeader => "a header of 1 MiB".into(),
            H2Case::WindowOverflow => "WINDOW_UPDATE past 2^31 - 1".into(),
            H2Case::ZeroWindow => "initial window 0, 100 calls that cannot be answered".into(),
            H2Case::GarbageFrames => "the preface, then 64 KiB of garbage".into(),
            H2Case::BadStreamIds => "an even stream id, then a closed one reused".into(),
        }
    }
}

/// What a case did.
#[derive(Clone, Debug)]
pub struct H2Report {
    pub case: H2Case,
    /// `h2c` or `h2 over TLS`.
    pub transport: &'static str,
    /// What the hostile client saw, in words (its streams' ends, or the connection's).
    pub seen: String,
    /// How long until the server had ended it all (closed, reset or answered).
    pub ended_after: Duration,
    /// The good caller was answered OK during and after.
    pub others_served: bool,
    /// What a second run of the case left allocated (KiB; negative: less): a client's
    /// leftovers, counted by the allocator (resident memory would also hold what the
    /// allocator keeps after a free: 20 to 95 MiB after an idle flood, varying by run).
    pub heap_kib: i64,
    /// File descriptors still held after the case ended.
    pub fds: i64,
}

/// What a case's second run may leave allocated: 256 KiB, against the 2 to 10 KiB the
/// good caller's own traffic leaves; 32 bytes kept for each of an idle flood's 15,000 or
/// more connections would exceed it.
pub const HEAP_MARGIN_KIB: i64 = 256;

impl H2Report {
    /// Whether it went as it must: others served, no more than 16 file descriptors
    /// still held, and the measured run leaving at most `HEAP_MARGIN_KIB` allocated.
    pub fn ok(&self) -> bool {
        self.others_served && self.heap_kib <= HEAP_MARGIN_KIB && self.fds <= 16
    }
}

/// A service for the cases: the memory store, short deadlines, so a case ends quickly;
/// with `tls`, its gRPC listener speaks TLS (client certificates required) and its HTTP
/// listener, the good caller's, plaintext.
async fn service(tls: Option<&TlsFiles>) -> anyhow::Result<(Running, std::path::PathBuf)> {
    let dir = std::env::temp_dir().join(format!("spillway-h2-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("reliability.yaml"), crate::Policy::Closed.yaml())?;
    let mut config = Config::ephemeral(&dir);
    config.rules.watch = false;
    config.listen.grpc_request_timeout = Duration::from_millis(300);
    config.listen.header_read_timeout = Duration::from_millis(500);
    config.listen.idle_timeout = Duration::from_secs(1);
    config.listen.max_connections = Some(MAX_CONNECTIONS);
    if let Some(files) = tls {
        config.tls.cert = Some(files.server.cert.clone());
        config.tls.key = Some(files.server.key.clone());
        config.tls.client_ca = Some(files.ca.clone());
        config.tls.listeners =
            Some(spillway_server::config::TlsListeners::parse("grpc").map_err(anyhow::Error::msg)?);
    }
    let running = App::builder(config).build().await?.start().await?;
    Ok((running, dir))
}

/// The certificates of the TLS cases.
struct TlsFiles {
    _pki: Pki,
    ca: std::path::PathBuf,
    server: Pair,
    client: Pair,
}

/// Runs each case against a fresh service: over h2c, or (`tls`) h2 over TLS.
pub async fn h2_clients(cases: &[H2Case], tls: bool) -> anyhow::Result<Vec<H2Report>> {
    super::count_panics();
    let files = tls.then(|| {
        let pki = Pki::new("hostile-h2");
        TlsFiles {
            ca: pki.ca(),
            server: pki.issue("server", Leaf::Good),
            client: pki.issue("client", Leaf::Good),
            _pki: pki,
        }
    });
    let transport = match &files {
        None => Transport::Plain,
        Some(f) => Transport::Tls(Arc::new(client_config(&f.ca, Some(&f.client), &[b"h2"]))),
    };
    let mut reports = Vec::new();
    for &case in cases {
        let (running, dir) = service(files.as_ref()).await?;
        let good = Good {
            sender: super::Sender::new(&running)?,
            http: reqwest::Client::new(),
            over_http: tls,
            message: super::cases::grpc_request("good"),
        };
        // Warm: the good caller's connection and the service's first answers.
        let warm = good.call().await;
        let fds = crate::open_fds();
        // Twice: the first run grows what is kept for reuse (the runtime's slabs, the
        // session cache), so what the second adds is what a client leaves behind.
        let mut served = warm;
        served &= round(case, &transport, &running, &good).await.2;
        settle_fds(fds).await;
        let refused_before = refused(&good).await;
        let heap = crate::heap_bytes();
        let (mut seen, ended_after, last) = round(case, &transport, &running, &good).await;
        if let H2Case::IdleConnections(_) = case {
            let n = refused(&good).await - refused_before;
            seen.push_str(&format!(
                " ({n} at once, over the cap: spillway_connections_refused_total)"
            ));
        }
        let fds_after = settle_fds(fds).await;
        let kept = || (crate::heap_bytes() - heap) / 1024;
        let heap_kib = settle(kept, |&kib| kib <= HEAP_MARGIN_KIB).await;
        drop(good);
        reports.push(H2Report {
            case,
            transport: transport.name(),
            seen,
            ended_after,
            others_served: served && last,
            heap_kib,
            fds: fds_after as i64 - fds as i64,
        });
        running.stop().await;
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(reports)
}

/// The gRPC listener's connections closed at once over its cap, so far (the metric,
/// read on the HTTP listener; every service in this process shares the recorder).
async fn refused(good: &Good) -> u64 {
    let url = format!("http://{}/metrics", good.sender.http_addr);
    let text = match good.http.get(url).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    spillway_testkit::metric(
        &text,
        "spillway_connections_refused_total{listener=\"grpc\"",
    )
}

/// The good caller: a valid `ShouldRateLimit` on its own connection, or (when the gRPC
/// port speaks TLS) a valid `/v1/check` on the HTTP port.
struct Good {
    sender: super::Sender,
    http: reqwest::Client,
    over_http: bool,
    /// The `ShouldRateLimit` it sends, encoded once.
    message: Vec<u8>,
}

impl Good {
    /// Answered OK.
    async fn call(&self) -> bool {
        if self.over_http {
            let body = r#"{"domain":"reliability","descriptors":[{"entries":[{"key":"user","value":"good"}]}]}"#;
            let sent = self
                .http
                .post(format!("http://{}/v1/check", self.sender.http_addr))
                .body(body)
                .send()
                .await;
            return sent.is_ok_and(|r| r.status() == 200);
        }
        self.sender.grpc(&self.message).await.0 == "0 OK"
    }
}

/// One run of the hostile client of `case`, the good caller asking every 50 ms
/// meanwhile and once after: what the client saw, how long it took, and whether the good
/// caller was answered OK every time.
async fn round(
    case: H2Case,
    transport: &Transport,
    running: &Running,
    good: &Good,
) -> (String, Duration, bool) {
    let started = Instant::now();
    let served = std::cell::Cell::new(true);
    let hostile = run(case, transport, running.grpc_addr);
    let watch = async {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            served.set(served.get() && good.call().await);
            if served_enough(started) {
                return;
            }
        }
    };
    let seen = tokio::select! {
        seen = hostile => seen,
        () = watch => String::from("still running after 30 s"),
    };
    let ended_after = started.elapsed();
    (seen, ended_after, served.get() && good.call().await)
}

/// `read()` once `settled` says so, or after 3 s: what the case left once the server has
/// let go of its connections. A socket closes a moment before the task that served it
/// ends and frees its buffers (once, over TLS, 429 KiB of heap for 100 stalled calls
/// read just after their sockets closed); what a leak keeps stays, and is reported.
async fn settle<T>(read: impl Fn() -> T, settled: impl Fn(&T) -> bool) -> T {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let value = read();
        if settled(&value) || Instant::now() >= until {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// File descriptors open, waiting for no more than 16 past `fds`.
async fn settle_fds(fds: u64) -> u64 {
    settle(crate::open_fds, |&open| open <= fds + 16).await
}

fn served_enough(started: Instant) -> bool {
    started.elapsed() > Duration::from_secs(30)
}

impl fmt::Display for H2Report {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "| {} | {} | {} | {:.1} s | {} | {:+} KiB | {:+} | {} |",
            self.transport,
            self.case.describe(),
            self.seen,
            self.ended_after.as_secs_f64(),
            if self.others_served { "yes" } else { "**no**" },
            self.heap_kib,
            self.fds,
            if self.ok() { "yes" } else { "**no**" }
        )
    }
}

/// The table's header, for [`H2Report`]'s rows.
pub const H2_HEADER: &str = "| on the gRPC port | HTTP/2 client | what it saw | ended after | others served | heap after | fds after | as it must |\n|---|---|---|---|---|---|---|---|";
