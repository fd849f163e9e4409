//! The reference's stats to statsd, as the reference sends them: counters as the
//! deltas since the last send (`name:N|c`, none for a counter that did not move)
//! every flush interval, the response time of each gRPC call in ms (`name:N|ms`)
//! every second. Plain statsd writes tags in the name (`name.__k=v`, sorted, as
//! gostats); DogStatsD after it (`name:N|c|#k:v`), its name first renamed by the
//! first mogrifier that matches.
//!
//! Sent from a blocking thread of its own: a decision only adds to an atomic, and a
//! statsd that is down, slow or absent costs it nothing (UDP to nobody is dropped by
//! the kernel; a TCP statsd that refuses is tried again at the next send).

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use cadence::prelude::*;
use cadence::{BufferedUdpMetricSink, MetricSink, StatsdClient};
use parking_lot::Mutex;
use regex::Regex;
use tokio_util::sync::CancellationToken;

use super::Stats;
use crate::config;

/// Where and how the stats go.
struct Sender {
    client: StatsdClient,
    dogstatsd: bool,
    /// `EXTRA_TAGS`: plain statsd's name suffix, or DogStatsD's tags.
    tags: Vec<(String, String)>,
    suffix: String,
    mogrifiers: Vec<(Regex, config::Mogrifier)>,
}

/// Sends `stats` to `settings.statsd` until `shutdown` (then once more, so nothing
/// counted is lost); logs once why it cannot, and keeps trying.
pub(crate) fn spawn(stats: Arc<Stats>, settings: &config::Stats, shutdown: CancellationToken) {
    let Some(addr) = settings.statsd.clone() else {
        return;
    };
    let sender = match Sender::new(&addr, settings) {
        Ok(sender) => sender,
        Err(e) => {
            tracing::warn!(target: "spillway_server", %addr, error = %e, "statsd: no stats will be sent");
            return;
        }
    };
    let every = settings.flush_interval;
    tracing::info!(
        target: "spillway_server",
        %addr,
        protocol = if settings.statsd_tcp { "tcp" } else { "udp" },
        dogstatsd = settings.dogstatsd,
        flush_interval = ?every,
        "statsd: sending the reference's stats"
    );
    let sender = Arc::new(sender);
    tokio::spawn(async move {
        let mut second = tokio::time::interval(Duration::from_secs(1));
        let mut since_counters = Duration::ZERO;
        loop {
            let last = tokio::select! {
                _ = second.tick() => false,
                () = shutdown.cancelled() => true,
            };
            since_counters += Duration::from_secs(1);
            let counters = last || since_counters >= every;
            if counters {
                since_counters = Duration::ZERO;
            }
            let (stats, sender) = (Arc::clone(&stats), Arc::clone(&sender));
            let _ = tokio::task::spawn_blocking(move || sender.send(&stats, counters)).await;
            if last {
                return;
            }
        }
    });
}

impl Sender {
    fn new(addr: &str, settings: &config::Stats) -> io::Result<Sender> {
        let client = if settings.statsd_tcp && !settings.dogstatsd {
            StatsdClient::from_sink("", TcpSink::new(addr))
        } else {
            let to = resolve(addr)?;
            let local: SocketAddr = if to.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let socket = UdpSocket::bind(local)?;
            socket.set_nonblocking(true)?;
            let sink = BufferedUdpMetricSink::from(to, socket).map_err(io::Error::other)?;
            StatsdClient::from_sink("", sink)
        };
        let mut sorted = settings.tags.clone();
        sorted.sort();
        let suffix = sorted
            .iter()
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .map(|(k, v)| format!(".__{k}={}", v.replace(['.', ':', '|'], "_")))
            .collect();
        let mogrifiers = settings
            .mogrifiers
            .iter()
            .map(|m| Ok((Regex::new(&m.pattern).map_err(io::Error::other)?, m.clone())))
            .collect::<io::Result<_>>()?;
        // The reference writes the extra tags into the name whatever the sink (DogStatsD's
        // reads them back out of it), so their values lose `.`, `:` and `|` either way.
        let tags = sorted
            .into_iter()
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .map(|(k, v)| (k, v.replace(['.', ':', '|'], "_")))
            .collect();
        Ok(Sender {
            client,
            dogstatsd: settings.dogstatsd,
            tags,
            suffix,
            mogrifiers,
        })
    }

    /// One send: the timers taken since the last, and (when due) the counters' deltas.
    fn send(&self, stats: &Stats, counters: bool) {
        let (deltas, timers) = stats.drain(counters);
        for (name, delta) in deltas {
            let (name, tags) = self.named(&name);
            let delta = i64::try_from(delta).unwrap_or(i64::MAX);
            let mut metric = self.client.count_with_tags(&name, delta);
            for (k, v) in &tags {
                metric = metric.with_tag(k, v);
            }
            let _ = metric.try_send();
        }
        for (name, ms) in timers {
            let (name, tags) = self.named(name);
            let mut metric = self.client.time_with_tags(&name, ms);
            for (k, v) in &tags {
                metric = metric.with_tag(k, v);
            }
            let _ = metric.try_send();
        }
        let _ = self.client.flush();
    }

    /// The name a stat is sent as, and its DogStatsD tags: plain statsd carries the
    /// tags in the name; DogStatsD renames by the first mogrifier that matches and
    /// adds its tags after the extra ones.
    fn named(&self, name: &str) -> (String, Vec<(String, String)>) {
        if !self.dogstatsd {
            return (format!("{name}{}", self.suffix), Vec::new());
        }
        let mut tags = self.tags.clone();
        for (pattern, m) in &self.mogrifiers {
            if let Some(caps) = pattern.captures(name) {
                let expand = |template: &str| {
                    let mut out = String::new();
                    caps.expand(template, &mut out);
                    out
                };
                tags.extend(m.tags.iter().map(|(k, v)| (k.clone(), expand(v))));
                return (expand(&m.name), tags);
            }
        }
        (name.to_owned(), tags)
    }
}

/// The first address `addr` resolves to, IPv4 first (a socket bound to 0.0.0.0
/// cannot reach `localhost`'s ::1).
fn resolve(addr: &str) -> io::Result<SocketAddr> {
    let all: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or_else(|| all.first())
        .copied()
        .ok_or_else(|| io::Error::other(format!("`{addr}` resolves to no address")))
}

/// Statsd over TCP, as gostats sends it by default: one connection, lines ending in
/// `\n`, written when flushed; a failed write drops the connection and what was
/// buffered (the reference drops them too), and the next flush connects again.
struct TcpSink {
    addr: String,
    state: Mutex<Tcp>,
}

// A panic while the lock is held leaves at worst a half-written buffer, which the next
// flush sends or drops: nothing a caller relies on.
impl std::panic::RefUnwindSafe for TcpSink {}

#[derive(Default)]
struct Tcp {
    conn: Option<TcpStream>,
    buffer: Vec<u8>,
    /// Said once until a send works again.
    warned: bool,
}

/// The most bytes buffered for one flush: past it, lines are dropped.
const TCP_BUFFER_BYTES: usize = 1 << 20;

impl TcpSink {
    fn new(addr: &str) -> TcpSink {
        TcpSink {
            addr: addr.to_owned(),
            state: Mutex::new(Tcp::default()),
        }
    }
}

impl MetricSink for TcpSink {
    fn emit(&self, metric: &str) -> io::Result<usize> {
        let mut s = self.state.lock();
        if s.buffer.len() + metric.len() < TCP_BUFFER_BYTES {
            s.buffer.extend_from_slice(metric.as_bytes());
            s.buffer.push(b'\n');
        }
        Ok(metric.len())
    }

    fn flush(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        if s.buffer.is_empty() {
            return Ok(());
        }
        let addr = &self.addr;
        let result = (|| {
            if s.conn.is_none() {
                let to = resolve(addr)?;
                let conn = TcpStream::connect_timeout(&to, Duration::from_millis(500))?;
                conn.set_write_timeout(Some(Duration::from_secs(1)))?;
                s.conn = Some(conn);
            }
            let Tcp { conn, buffer, .. } = &mut *s;
            conn.as_mut().expect("connected above").write_all(buffer)
        })();
        s.buffer.clear();
        match result {
            Ok(()) => {
                s.warned = false;
                Ok(())
            }
            Err(e) => {
                s.conn = None;
                if !s.warned {
                    s.warned = true;
                    tracing::warn!(target: "spillway_server", addr = %addr, error = %e, "statsd: could not send; stats dropped until it answers");
                }
                Err(e)
            }
        }
    }
}
