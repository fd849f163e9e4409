//! What `serve` says and does about itself: it stops on SIGTERM with its log reader
//! gone, and warns at startup about listeners and rule sources open to other hosts.

use std::path::Path;
use std::process::{Command, Stdio};

use super::terminate;
use crate::support;

/// With whatever read its log gone (a closed stderr), `serve` still stops on SIGTERM.
/// Reproduces a bug: tracing-subscriber reports a failed write with `eprintln!`, which
/// panicked in the shutdown task, so the signal was lost and the service ran on.
#[test]
fn sigterm_stops_serve_after_its_log_reader_is_gone() {
    use std::io::BufRead;
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--config"])
        .arg(&example)
        .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "off", "--no-watch"])
        .env_clear()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening") {
        line.clear();
        assert!(log.read_line(&mut line).unwrap() > 0, "serve exited early");
    }
    drop(log);
    terminate(&child);
    let stopped = (0..1500).any(|_| {
        let done = child.try_wait().unwrap().is_some();
        if !done {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        done
    });
    if !stopped {
        let _ = child.kill();
    }
    assert!(stopped, "serve ignored SIGTERM for 15 s");
}

/// Issue #37 (6): an admin listener other hosts can reach, without a token, is warned
/// about at startup; with a token, or on loopback, it is not.
#[test]
fn an_admin_listener_open_to_other_hosts_without_a_token_is_warned_about() {
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let dir = support::tempdir("admin-warning");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let start = |admin: &str, extra: &[&str]| {
        let mut args = vec![
            "--config",
            policies.to_str().unwrap(),
            "--admin-addr",
            admin,
        ];
        args.extend(extra);
        let log = startup_log(&args);
        assert!(
            log.last().is_some_and(|l| l.contains("listening")),
            "{log:#?}"
        );
        log.iter().any(|l| l.contains("has no token"))
    };
    assert!(start("0.0.0.0:0", &[]), "open to other hosts, no token");
    assert!(!start(
        "0.0.0.0:0",
        &["--admin-token-file", token.to_str().unwrap()]
    ));
    assert!(!start("127.0.0.1:0", &[]));
}

#[test]
fn rules_over_plaintext_xds_from_another_host_are_warned_about() {
    let start = |server: &str| {
        startup_log(&["--admin-addr", "127.0.0.1:0", "--xds-server", server])
            .iter()
            .any(|l| l.contains("in plaintext from another host"))
    };
    // 192.0.2.0/24 is TEST-NET-1: never anyone's host.
    assert!(start("192.0.2.1:18000"), "another host, no TLS");
    assert!(!start("127.0.0.1:18000"));
    assert!(!start("localhost:18000"));
}

/// `spillway serve` on loopback ports with `args` and no environment: its log until it
/// says it is listening (then it is stopped).
fn startup_log(args: &[&str]) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args([
            "serve",
            "--http-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
        ])
        .args(args)
        .env_clear()
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = support::until_listening(&mut child);
    let _stop = support::Procs(vec![child]);
    log
}

/// `worker_threads` sizes the runtime, and the log (at debug) says how many serve: tokio's
/// choice when it is not set (one per CPU here), the setting's when it is.
#[test]
fn the_worker_threads_setting_sizes_the_runtime_and_is_logged() {
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let workers = |extra: &[&str]| -> usize {
        let mut args = vec![
            "--config",
            policies.to_str().unwrap(),
            "--admin-addr",
            "off",
            "--log-level",
            "spillway=debug,info",
        ];
        args.extend(extra);
        let log = startup_log(&args);
        let line = log
            .iter()
            .find(|l| l.contains("worker threads"))
            .unwrap_or_else(|| panic!("no worker threads line: {log:#?}"));
        // `workers=N` as text, `"workers":N` as JSON.
        let n = line.split("workers").nth(1).expect("workers N");
        let n = n.trim_start_matches(|c: char| !c.is_ascii_digit());
        n.split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(workers(&[]), cpus);
    assert_eq!(workers(&["--worker-threads", "1"]), 1);
    assert_eq!(workers(&["--worker-threads", "3"]), 3);
}
