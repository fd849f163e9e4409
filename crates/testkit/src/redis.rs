//! Real Redis servers for tests.
//!
//! The shared servers (a standalone server, a 6-node Cluster, a Sentinel) are started
//! by `scripts/test` before the suite and stopped by PID after it; tests find them
//! through environment variables. A test that must break its server (freeze it, kill
//! it) starts its own with [`RedisServer::start`], which is killed when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) fn shared(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: run the suite with scripts/test, which starts the Redis \
             servers the tests need (or export {var} yourself)"
        )
    })
}

/// The shared standalone server: `redis://127.0.0.1:PORT`.
pub fn standalone_url() -> String {
    shared("SPILLWAY_TEST_REDIS")
}

/// The shared Redis Cluster (3 masters, 3 replicas): `redis+cluster://…`.
pub fn cluster_url() -> String {
    shared("SPILLWAY_TEST_CLUSTER")
}

/// A Sentinel watching the standalone server as master `spillway`.
pub fn sentinel_url() -> String {
    shared("SPILLWAY_TEST_SENTINEL")
}

/// The shared TLS server (client certificates required; files in
/// [`tls::shared_files`](crate::tls::shared_files)): `rediss://127.0.0.1:PORT`.
pub fn tls_standalone_url() -> String {
    shared("SPILLWAY_TEST_TLS_REDIS")
}

/// The shared TLS Cluster (TLS on its bus and replication too): `rediss+cluster://…`.
pub fn tls_cluster_url() -> String {
    shared("SPILLWAY_TEST_TLS_CLUSTER")
}

/// A TLS sentinel watching the TLS server as master `spillway-tls`.
pub fn tls_sentinel_url() -> String {
    shared("SPILLWAY_TEST_TLS_SENTINEL")
}

/// The shared Valkey 8 server: `redis://127.0.0.1:PORT`.
pub fn valkey_url() -> String {
    shared("SPILLWAY_TEST_VALKEY")
}

/// The shared Redis 6.2 server, the oldest Spillway runs on (no functions, no
/// `PEXPIRE … NX`): `redis://127.0.0.1:PORT`.
pub fn redis62_url() -> String {
    shared("SPILLWAY_TEST_REDIS62")
}

/// The shared Valkey 8 Cluster (3 masters, 3 replicas).
pub fn valkey_cluster_url() -> String {
    shared("SPILLWAY_TEST_VALKEY_CLUSTER")
}

/// A key prefix no other test or run shares, so tests on one server never see each
/// other's keys: `test:<name>:<random>:`.
pub fn unique_prefix(name: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("test:{name}:{random:016x}:")
}

/// A redis-server of the test's own, on a free loopback port, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    binary: String,
    child: Child,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    /// `redis-cli`'s TLS arguments, for a TLS-only server.
    tls_cli: Option<Vec<String>>,
}

/// A TLS server's files and whether it asks for client certificates.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// The CA whose client certificates it accepts (and that the client trusts).
    pub ca: PathBuf,
    /// Its certificate and key.
    pub server: crate::tls::Pair,
    /// A good client certificate from `ca`, which `redis-cli` presents.
    pub client: crate::tls::Pair,
    /// `yes`, `no` or `optional` (redis-server's `--tls-auth-clients`).
    pub auth_clients: &'static str,
}

/// The Redis a benchmark runs against: `SPILLWAY_BENCH_REDIS` if set, else a server of
/// its own (kept alive by the returned guard).
pub fn bench_redis() -> (Option<RedisServer>, String) {
    match std::env::var("SPILLWAY_BENCH_REDIS") {
        Ok(url) => (None, url),
        Err(_) => {
            let s = RedisServer::start();
            let url = s.url();
            (Some(s), url)
        }
    }
}

impl RedisServer {
    /// Starts a standalone server and waits until it answers PING.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`--cluster-enabled yes`, …),
    /// on a port whose cluster bus port (+10000) is free too, and waits until it
    /// answers PING. [`restart`](Self::restart) starts it with the same arguments, in
    /// the same directory (a cluster node finds its `nodes.conf` there and rejoins).
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::launch(args, None)
    }

    /// Starts a TLS-only server (`--port 0 --tls-port PORT`) with `tls`'s files, and
    /// waits until it answers PING over TLS.
    pub fn start_tls(tls: &ServerTls, args: &[&str]) -> RedisServer {
        RedisServer::launch(args, Some(tls))
    }

    /// Starts a `valkey-server` of the test's own (the one `scripts/test` installs,
    /// `SPILLWAY_TEST_VALKEY_SERVER`).
    pub fn start_valkey() -> RedisServer {
        RedisServer::launch_with(&shared("SPILLWAY_TEST_VALKEY_SERVER"), &[], None)
    }

    fn launch(args: &[&str], tls: Option<&ServerTls>) -> RedisServer {
        RedisServer::launch_with("redis-server", args, tls)
    }

    fn launch_with(binary: &str, args: &[&str], tls: Option<&ServerTls>) -> RedisServer {
        let port = crate::port::free_with_bus();
        let dir = std::env::temp_dir().join(format!("spillway-redis-{port}"));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let mut all: Vec<String> = Vec::new();
        let mut tls_cli = None;
        if let Some(t) = tls {
            let path = |p: &std::path::Path| p.display().to_string();
            all.extend([
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.to_string(),
                "--tls-cert-file".into(),
                path(&t.server.cert),
                "--tls-key-file".into(),
                path(&t.server.key),
                "--tls-ca-cert-file".into(),
                path(&t.ca),
                "--tls-auth-clients".into(),
                t.auth_clients.into(),
            ]);
            // redis-cli checks nothing: the server's certificate may be one a test
            // wants refused.
            tls_cli = Some(vec![
                "--tls".into(),
                "--insecure".into(),
                "--cert".into(),
                path(&t.client.cert),
                "--key".into(),
                path(&t.client.key),
            ]);
        }
        all.extend(args.iter().map(|a| a.to_string()));
        let child = spawn(binary, port, &dir, &all);
        let server = RedisServer {
            binary: binary.to_owned(),
            child,
            port,
            dir,
            args: all,
            tls_cli,
        };
        server.wait_for_ping();
        server
    }

    /// Kills the server with SIGKILL: no shutdown, its data gone (it keeps none on disk).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a fresh server on the same port (after [`kill`](Self::kill)), and waits
    /// until it answers PING.
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn(&self.binary, self.port, &self.dir, &self.args);
        self.wait_for_ping();
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Up to 30 s: on a busy machine a server took more than 3 s to write its first
    /// log line (the test command running the reliability experiments beside the
    /// others, beside two CPU hogs).
    fn wait_for_ping(&self) {
        for _ in 0..3000 {
            if self.ping() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        panic!(
            "{} on port {} did not answer PING within 30 s; its log ends:\n{}",
            self.binary,
            self.port,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` for a TLS server).
    pub fn url(&self) -> String {
        let s = if self.tls_cli.is_some() { "s" } else { "" };
        format!("redis{s}://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` with `args` against this server (over TLS for a TLS one) and
    /// returns what it printed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self
            .cli_command()
            .args(args)
            .output()
            .expect("redis-cli runs (it comes with redis-server)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `redis-cli` aimed at this server (with its TLS flags for a TLS one), for a
    /// caller to add arguments to and run where it likes (a thread of its own, say).
    pub fn cli_command(&self) -> Command {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-p", &self.port.to_string()])
            .args(self.tls_cli.iter().flatten());
        cmd
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Calls of the decision code (`FCALL`, `EVALSHA` and `EVAL`) the server has
    /// answered, from `INFO commandstats` (through `redis-cli`, which comes with
    /// `redis-server`).
    pub fn script_calls(&self) -> u64 {
        script_calls_in(&self.cli(&["INFO", "commandstats"]))
    }

    /// Sends a signal (`STOP`, `CONT`, `KILL`, …) to the server.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    fn ping(&self) -> bool {
        if self.tls_cli.is_some() {
            return self.cli(&["PING"]).trim() == "PONG";
        }
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 7];
        // A server with a password answers -NOAUTH: up all the same.
        s.write_all(b"PING\r\n").is_ok()
            && s.read_exact(&mut buf).is_ok()
            && (&buf == b"+PONG\r\n" || &buf == b"-NOAUTH")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A killed server is already gone: no "No such process" on stderr.
        let _ = Command::new("kill")
            .args(["-CONT", &self.pid().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn(binary: &str, port: u16, dir: &std::path::Path, args: &[String]) -> Child {
    Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        // Fault tests freeze it with DEBUG SLEEP.
        .args(["--enable-debug-command", "local"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("log"))
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server runs (scripts/test installs it)")
}

/// The `FCALL`, `EVALSHA` and `EVAL` calls an `INFO commandstats` reply counts.
pub fn script_calls_in(info: &str) -> u64 {
    info.lines()
        .filter(|l| {
            ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_fcall:"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
