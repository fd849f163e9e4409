//! Slow clients: connections held open without finishing a request.

use std::fmt;
use std::time::Duration;

use crate::Policy;
use crate::trial::service_settings;

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
    settings.listen.header_read_timeout = header_read;
    let running = crate::trial::start(settings.clone()).await?;
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
    let _ = std::fs::remove_dir_all(&settings.rules.path);
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
