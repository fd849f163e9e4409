//! The load behind envoy_shares.rs: an upstream that records what it serves, keep-alive
//! HTTP/1.1 clients of Envoy (closed-loop floods and an open-loop light tenant), and
//! what the test counts from both.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spillway_core::{Clock, SystemClock};

pub(super) const TENANTS: [&str; 4] = ["a", "b", "c", "d"];

/// A time on the system clock, µs (read through spillway_core's clock, as every test).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct At(u64);

impl At {
    pub(super) fn now() -> At {
        At(SystemClock.now().as_micros())
    }

    fn elapsed(self) -> Duration {
        At::now() - self
    }
}

impl std::ops::Add<Duration> for At {
    type Output = At;
    fn add(self, d: Duration) -> At {
        At(self.0 + d.as_micros() as u64)
    }
}

impl std::ops::AddAssign<Duration> for At {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl std::ops::Sub for At {
    type Output = Duration;
    fn sub(self, earlier: At) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

/// What the upstream served: (tenant index, when).
pub(super) type Served = Arc<Mutex<Vec<(usize, At)>>>;

/// An upstream answering `200 ok`, recording each request's `x-tenant` and time.
pub(super) fn counting_upstream() -> (u16, Served) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served: Served = Arc::default();
    let record = Arc::clone(&served);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let record = Arc::clone(&record);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut tenant = None;
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("x-tenant: ") {
                            tenant = TENANTS.iter().position(|t| *t == v.trim());
                        }
                    }
                    if let Some(t) = tenant {
                        record.lock().unwrap().push((t, At::now()));
                    }
                    let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if reader.get_mut().write_all(ok.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, served)
}

/// One answer a client saw: tenant index, when it was sent, how long it took, status.
#[derive(Clone, Copy)]
pub(super) struct Seen {
    pub(super) tenant: usize,
    pub(super) sent: At,
    pub(super) took: Duration,
    pub(super) status: u16,
}

/// A keep-alive HTTP/1.1 client of Envoy.
pub(super) struct Client {
    port: u16,
    conn: Option<BufReader<TcpStream>>,
}

impl Client {
    /// One GET as `tenant` at `tier`: the status (0 if the connection failed).
    fn get(&mut self, tenant: &str, tier: &str) -> u16 {
        for _ in 0..2 {
            if self.conn.is_none() {
                let Ok(s) = TcpStream::connect(("127.0.0.1", self.port)) else {
                    continue;
                };
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s.set_nodelay(true).unwrap();
                self.conn = Some(BufReader::new(s));
            }
            let conn = self.conn.as_mut().unwrap();
            let req = format!(
                "GET / HTTP/1.1\r\nhost: app\r\nx-tenant: {tenant}\r\nx-tier: {tier}\r\n\r\n"
            );
            if let Some(status) = conn
                .get_mut()
                .write_all(req.as_bytes())
                .ok()
                .and_then(|()| read_response(conn))
            {
                return status;
            }
            self.conn = None;
        }
        0
    }
}

/// A response's status, its body read (content-length) so the connection is reusable.
pub(super) fn read_response(conn: &mut BufReader<TcpStream>) -> Option<u16> {
    let mut line = String::new();
    conn.read_line(&mut line).ok()?;
    let status = line.get(9..12)?.parse().ok()?;
    let mut length = 0usize;
    loop {
        line.clear();
        if conn.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length: ") {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).ok()?;
    Some(status)
}

/// What runs: a flag per tenant, and one to stop every client.
pub(super) struct Switches {
    pub(super) on: [AtomicBool; 4],
    pub(super) done: AtomicBool,
}

/// `n` closed-loop clients of `tenant`: each asks again as soon as it is answered (20
/// ms after a 429, as a client backing off would), while its tenant is switched on.
pub(super) fn flood(
    port: u16,
    tenant: usize,
    tier: &'static str,
    n: usize,
    switches: &Arc<Switches>,
    seen: &Arc<Mutex<Vec<Seen>>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let (switches, seen) = (Arc::clone(switches), Arc::clone(seen));
            std::thread::spawn(move || {
                let mut client = Client { port, conn: None };
                while !switches.done.load(Ordering::Relaxed) {
                    if !switches.on[tenant].load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    let sent = At::now();
                    let status = client.get(TENANTS[tenant], tier);
                    let took = sent.elapsed();
                    seen.lock().unwrap().push(Seen {
                        tenant,
                        sent,
                        took,
                        status,
                    });
                    if status != 200 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect()
}

/// B: 30 a second, open loop — three clients of 10 a second each, a third of a tick
/// apart, each sending on its schedule whatever the answers take.
pub(super) fn light(
    port: u16,
    switches: &Arc<Switches>,
    seen: &Arc<Mutex<Vec<Seen>>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..3u32)
        .map(|k| {
            let (switches, seen) = (Arc::clone(switches), Arc::clone(seen));
            std::thread::spawn(move || {
                let mut client = Client { port, conn: None };
                let tick = Duration::from_millis(100);
                let mut next = At::now() + tick * k / 3;
                while !switches.done.load(Ordering::Relaxed) {
                    let now = At::now();
                    if now < next {
                        std::thread::sleep(next - now);
                    }
                    // A stalled thread does not catch up in a bunch: its next send is
                    // at least half a tick after this one.
                    next = (next + tick).max(At::now() + tick / 2);
                    if !switches.on[1].load(Ordering::Relaxed) {
                        continue;
                    }
                    let sent = At::now();
                    let status = client.get("b", "interactive");
                    seen.lock().unwrap().push(Seen {
                        tenant: 1,
                        sent,
                        took: sent.elapsed(),
                        status,
                    });
                }
            })
        })
        .collect()
}

/// Per tenant, what the upstream served in [from, to).
pub(super) fn served_between(served: &[(usize, At)], from: At, to: At) -> [usize; 4] {
    let mut n = [0; 4];
    for &(t, at) in served {
        if at >= from && at < to {
            n[t] += 1;
        }
    }
    n
}

/// The most the upstream served, all tenants together, in any window of `len`.
pub(super) fn most_in_any(served: &[(usize, At)], len: Duration) -> usize {
    let mut at: Vec<At> = served.iter().map(|&(_, at)| at).collect();
    at.sort_unstable();
    let (mut most, mut start) = (0, 0);
    for end in 0..at.len() {
        while at[end] - at[start] >= len {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most
}
