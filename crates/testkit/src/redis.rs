//! Real Redis servers for tests.
//!
//! The shared servers (a standalone server, a 6-node Cluster, a Sentinel) are started
//! by `scripts/test` before the suite and stopped by PID after it; tests find them
//! through environment variables. A test that must break its server (freeze it, kill
//! it) starts its own with [`RedisServer::start`], which is killed when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn shared(var: &str) -> String {
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
    child: Child,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
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
        let port = loop {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            if port < 55535 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
                break port;
            }
        };
        let dir = std::env::temp_dir().join(format!("spillway-redis-{port}"));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let child = spawn(port, &dir, &args);
        let server = RedisServer {
            child,
            port,
            dir,
            args,
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
        self.child = spawn(self.port, &self.dir, &self.args);
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

    fn wait_for_ping(&self) {
        for _ in 0..300 {
            if self.ping() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "redis-server on port {} did not answer PING within 3 s",
            self.port
        );
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Script calls (`EVALSHA` and `EVAL`) the server has answered, from `INFO
    /// commandstats` (through `redis-cli`, which comes with `redis-server`).
    pub fn script_calls(&self) -> u64 {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "INFO", "commandstats"])
            .output()
            .expect("redis-cli runs (it comes with redis-server)");
        script_calls_in(&String::from_utf8_lossy(&out.stdout))
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
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
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

fn spawn(port: u16, dir: &std::path::Path, args: &[String]) -> Child {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        // Fault tests freeze it with DEBUG SLEEP.
        .args(["--enable-debug-command", "local"])
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server runs (scripts/test installs it)")
}

/// The `EVALSHA` and `EVAL` calls an `INFO commandstats` reply counts.
pub fn script_calls_in(info: &str) -> u64 {
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
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
