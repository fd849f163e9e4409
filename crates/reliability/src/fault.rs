//! The faults, each injected into a real `redis-server` (or the TCP proxy between it
//! and Spillway) and healed again.

use std::fmt;
use std::time::Duration;

use spillway_testkit::proxy::{Proxy, ProxyMode};
use spillway_testkit::redis::RedisServer;

/// One way Redis fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL, then a fresh server on the same port (its counters gone).
    Kill,
    /// SIGSTOP, then SIGCONT: connections stay up, nothing answers.
    Stop,
    /// `CLIENT PAUSE ALL`, then `CLIENT UNPAUSE`.
    ClientPause,
    /// `DEBUG SLEEP`: the server blocks for the fault's length.
    DebugSleep,
    /// `SCRIPT FLUSH` every 10 ms: every call may meet NOSCRIPT.
    ScriptFlush,
    /// The proxy drops everything; connections stay open.
    ProxyDrop,
    /// The proxy delays every request by 50 ms (longer than the store timeout).
    ProxyDelay,
    /// The proxy resets every connection, and every new one.
    ProxyReset,
}

impl Fault {
    /// Every fault, in the order the report lists them.
    pub const ALL: [Fault; 8] = [
        Fault::Kill,
        Fault::Stop,
        Fault::ClientPause,
        Fault::DebugSleep,
        Fault::ScriptFlush,
        Fault::ProxyDrop,
        Fault::ProxyDelay,
        Fault::ProxyReset,
    ];

    /// The name the command line and the report use.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Stop => "stop",
            Fault::ClientPause => "client-pause",
            Fault::DebugSleep => "debug-sleep",
            Fault::ScriptFlush => "script-flush",
            Fault::ProxyDrop => "proxy-drop",
            Fault::ProxyDelay => "proxy-delay",
            Fault::ProxyReset => "proxy-reset",
        }
    }

    /// Whether Redis loses its counters (windows spanning the fault are not comparable).
    pub fn loses_state(self) -> bool {
        self == Fault::Kill
    }

    /// Keeps the fault going for `length`, then heals it.
    pub async fn run(self, redis: &mut RedisServer, proxy: &Proxy, length: Duration) {
        match self {
            Fault::Kill => {
                redis.kill();
                tokio::time::sleep(length).await;
                redis.restart();
            }
            Fault::Stop => {
                redis.signal("STOP");
                tokio::time::sleep(length).await;
                redis.signal("CONT");
            }
            Fault::ClientPause => {
                let ms = length.as_millis().to_string();
                command(&redis.url(), &["CLIENT", "PAUSE", &ms, "ALL"]).await;
                tokio::time::sleep(length).await;
                command(&redis.url(), &["CLIENT", "UNPAUSE"]).await;
            }
            Fault::DebugSleep => {
                // The server blocks as soon as it reads the command; the client call
                // itself may give up sooner, so time the fault here.
                let (url, secs) = (redis.url(), format!("{:.3}", length.as_secs_f64()));
                tokio::spawn(async move { command(&url, &["DEBUG", "SLEEP", &secs]).await });
                tokio::time::sleep(length).await;
            }
            Fault::ScriptFlush => {
                let end = tokio::time::Instant::now() + length;
                while tokio::time::Instant::now() < end {
                    command(&redis.url(), &["SCRIPT", "FLUSH"]).await;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Fault::ProxyDrop | Fault::ProxyDelay | Fault::ProxyReset => {
                proxy.set(match self {
                    Fault::ProxyDrop => ProxyMode::Blackhole,
                    Fault::ProxyDelay => ProxyMode::Delay(Duration::from_millis(50)),
                    _ => ProxyMode::Reset,
                });
                tokio::time::sleep(length).await;
                proxy.set(ProxyMode::Pass);
            }
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        Fault::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Fault::ALL.iter().map(|f| f.name()).collect();
                format!("unknown fault `{s}` (expected one of {})", names.join(", "))
            })
    }
}

/// One command on a connection of its own, straight to the server (not through the
/// proxy); answers are not needed.
async fn command(url: &str, args: &[&str]) {
    let client = redis::Client::open(url).expect("a Redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("the fault's own connection");
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::RedisResult<redis::Value> = cmd.query_async(&mut conn).await;
}
