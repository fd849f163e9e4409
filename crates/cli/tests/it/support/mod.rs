//! Shared by the CLI's test files: a real service on loopback ports, on the test Redis.

#![allow(dead_code)]

mod clock;
pub mod docs;
pub mod envoy;
pub mod netns;

pub use clock::FakeClock;
pub use netns::curl_at;

use std::path::PathBuf;

use spillway_core::{ManualClock, Timestamp};
use spillway_server::{AnyStore, App, Config, Running};
use spillway_testkit::redis::{standalone_url, unique_prefix};

/// `spillway serve ARGS` (no environment but an admin listener on a port of its own,
/// unless ARGS name one: tests run side by side), once it logs that it is listening
/// ([`until_listening`]).
pub fn spawn_serve<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> std::process::Child {
    spawn_serve_with(args, &[])
}

/// [`spawn_serve`] with `env` set too (a preloaded library, its settings).
pub fn spawn_serve_with<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
    env: &[(&str, &str)],
) -> std::process::Child {
    spawn_serve_seen(args, env).0
}

/// [`spawn_serve_with`], and the log lines it wrote up to the one that says it is
/// listening (that one last).
pub fn spawn_serve_seen<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
    env: &[(&str, &str)],
) -> (std::process::Child, Vec<String>) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("serve")
        .args(args)
        .env_clear()
        .env("SPILLWAY_ADMIN_ADDR", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spillway starts");
    let seen = until_listening(&mut child);
    assert!(
        seen.last().is_some_and(|l| l.contains("listening")),
        "a listening line: {seen:#?}"
    );
    (child, seen)
}

/// The log lines of a `serve` started with a piped stderr, up to and including the one
/// that says it is listening (all of them, if it ended first). The rest of the log is
/// read on a thread until the process exits: with the pipe closed, its shutdown lines
/// would have nowhere to go and it would not stop on SIGTERM.
pub fn until_listening(child: &mut std::process::Child) -> Vec<String> {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut logs = std::io::BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    for line in logs.by_ref() {
        let line = line.unwrap();
        let listening = line.contains("listening");
        seen.push(line);
        if listening {
            break;
        }
    }
    std::thread::spawn(move || logs.for_each(drop));
    seen
}

/// Child processes, killed when the test ends however it ends.
#[derive(Debug)]
pub struct Procs(pub Vec<std::process::Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Kills a process by id when dropped, unless it has exited: for a child a test waits
/// on itself, so that a failed assertion does not leave it running (and holding the
/// test harness's output open).
#[derive(Debug)]
pub struct KillOnDrop(pub u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// `STATUS BODY` of one request to a loopback port (a POST of `body`, or a GET), over
/// a plain socket (HTTP/1.1, Connection: close).
pub fn curl(port: u16, path: &str, body: Option<&str>) -> String {
    curl_at(std::net::Ipv4Addr::LOCALHOST, port, path, body)
}

/// Text without its ANSI escapes (CSI: ESC [ parameters, then a letter), as a log
/// line reads without its colours.
pub fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(char::is_ascii_alphabetic);
        } else {
            out.push(c);
        }
    }
    out
}

/// A loopback port for a process to bind, outside the range outgoing connections use.
pub use spillway_testkit::port::free as free_port;

/// A scratch directory for this test process.
pub fn tempdir(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A service serving one policy file, its counters in the test Redis. Its clock is a
/// manual one stopped at the start of the next hour ([`clock::next_hour`]): the
/// reference's rules count in windows of the service's clock, and a minute or an hour
/// window that ended between two steps of a busy machine would change the outcome (the
/// native rules read Redis `TIME`, the default). The runtime must outlive the service.
pub fn server(name: &str, policy: &str) -> (tokio::runtime::Runtime, Running) {
    server_with(name, policy, |_| {})
}

/// [`server`] with `configure` applied to its configuration first.
pub fn server_with(
    name: &str,
    policy: &str,
    configure: impl FnOnce(&mut Config),
) -> (tokio::runtime::Runtime, Running) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempdir(name);
    std::fs::write(dir.join("policy.yaml"), policy).unwrap();
    let mut config = Config::ephemeral(dir);
    configure(&mut config);
    let running = runtime.block_on(async {
        // These tests are about the commands, not store latency: a call that takes
        // longer than the 10 ms default on a busy machine (the suite runs the Redis
        // benches beside them) must not turn into a 503 the command then reports.
        let store = spillway_redis::RedisStore::builder(standalone_url())
            .prefix(unique_prefix(name))
            .timeout(std::time::Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        let clock = ManualClock::new(Timestamp::from_secs(clock::next_hour()));
        App::builder(config)
            .store(AnyStore::Redis(store))
            .clock(std::sync::Arc::new(clock))
            .build()
            .await
            .unwrap()
            .start()
            .await
            .unwrap()
    });
    (runtime, running)
}
