//! `spillway check --server`, as a process, against a real service (on a real Redis)
//! over gRPC and HTTP: exit statuses, peeking, JSON, and one-line errors.

use crate::support;

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
        text.starts_with("user=g: denied by `hourly`; 0 remaining (2 per hour), full again in "),
        "{text}"
    );
    let text = String::from_utf8(spillway(&["--server", &http, "--domain", "c", "user=h"]).stdout)
        .unwrap();
    assert!(
        text.starts_with("user=h: denied by `hourly`, retry in ")
            && text.contains("; 0 of 2 remaining (2 per hour), full again in "),
        "{text}"
    );
    let none = String::from_utf8(spillway(&["--server", &http, "--domain", "c", "other=x"]).stdout)
        .unwrap();
    assert_eq!(none.trim(), "other=x: allowed; no limit applies");

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

/// "Remaining" never reads above what the rule can hold: a `gcra` of 10 a second with a
/// burst of 20 holds 20, so a fresh key has 20 of 20, not "20 of 10 per second". The
/// service and the store say it in one sentence; over gRPC, whose answer carries the
/// rate but not the burst, without the "of".
#[test]
fn remaining_is_counted_against_the_capacity_in_one_sentence_both_ways() {
    let (runtime, running) = support::server(
        "check-burst",
        "domain: b\ndescriptors:\n  - key: user\n    limits:\n      - { name: burst, algorithm: gcra, limit: 10, window: 1s, burst: 20 }\n",
    );
    let grpc = format!("grpc://{}", running.grpc_addr);
    let http = format!("http://{}", running.http_addr);
    let text = |args: &[&str]| {
        let out = spillway(args);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };

    let said = text(&["--server", &http, "--domain", "b", "--peek", "user=u1"]);
    assert_eq!(
        said.trim(),
        "user=u1: would be allowed by `burst`; 20 of 20 remaining (10 per second), full again in 0s"
    );
    let said = text(&["--server", &grpc, "--domain", "b", "--peek", "user=u1"]);
    assert!(
        said.starts_with("user=u1: would be allowed by `burst`; 20 remaining (10 per second)"),
        "{said}"
    );
    let out = spillway(&["--server", &http, "--domain", "b", "--json", "user=u1"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &v["descriptors"][0];
    assert_eq!(
        (&d["remaining"], &d["capacity"], &d["limit"]),
        (&19.into(), &20.into(), &10.into())
    );

    // The store says it the same way.
    let said = text(&[
        "--store",
        "memory",
        "--algorithm",
        "gcra",
        "--limit",
        "10",
        "--window",
        "1s",
        "--burst",
        "20",
        "--peek",
        "user-1",
    ]);
    assert_eq!(
        said.trim(),
        "user-1: would be allowed; 20 of 20 remaining, full again in 0s"
    );
    runtime.block_on(running.stop());
}
