//! `spillway check --server`, as a process, against a real service (on a real Redis)
//! over gRPC and HTTP: exit statuses, peeking, JSON, and one-line errors.

mod support;

use std::process::{Command, Output};

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("check")
        .args(args)
        .output()
        .expect("spillway runs")
}

#[test]
fn check_asks_a_running_server_over_grpc_and_http() {
    let (runtime, running) = support::server(
        "check-server",
        "domain: c\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 2, name: hourly }\n",
    );
    let grpc = format!("grpc://{}", running.grpc_addr);
    let http = format!("http://{}", running.http_addr);

    for (server, user) in [(&grpc, "user=g"), (&http, "user=h")] {
        let peek = spillway(&["--server", server, "--domain", "c", "--peek", user]);
        assert_eq!(peek.status.code(), Some(0), "{peek:?}");
        for expected in [0, 0, 1] {
            let out = spillway(&["--server", server, "--domain", "c", user]);
            assert_eq!(out.status.code(), Some(expected), "{server}: {out:?}");
        }
        let out = spillway(&[
            "--server", server, "--domain", "c", "--json", "--peek", user,
        ]);
        assert_eq!(out.status.code(), Some(1));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["overall_code"], "OVER_LIMIT");
        assert_eq!(v["descriptors"][0]["rule"], "hourly");
        assert_eq!(v["descriptors"][0]["limit"], 2);
        assert_eq!(v["descriptors"][0]["unit"], "hour");
    }

    let text = String::from_utf8(spillway(&["--server", &grpc, "--domain", "c", "user=g"]).stdout)
        .unwrap();
    assert!(
        text.starts_with("OVER_LIMIT: user=g — OVER_LIMIT by `hourly`, 0 of 2 per hour remaining"),
        "{text}"
    );
    let none = String::from_utf8(spillway(&["--server", &http, "--domain", "c", "other=x"]).stdout)
        .unwrap();
    assert_eq!(none.trim(), "OK: other=x — no limit applies");

    for (args, expected) in [
        (
            vec!["--server", &http, "--domain", "", "a=b"],
            "answered 400 Bad Request: rate limit domain must not be empty",
        ),
        (
            vec!["--server", "grpc://127.0.0.1:1", "--domain", "c", "a=b"],
            "cannot reach grpc://127.0.0.1:1",
        ),
        (
            vec!["--server", "ftp://x", "--domain", "c", "a"],
            "is not grpc://, grpcs://, http:// or https:// followed by host:port",
        ),
        (vec!["--server", &grpc, "a=b"], "--domain"),
    ] {
        let out = spillway(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains(expected), "`{expected}` in {err}");
    }
    runtime.block_on(running.stop());
}
