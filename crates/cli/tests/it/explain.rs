//! `spillway explain`, as a process, against a real service: the verdict for a person
//! and as JSON, the exit status, nothing consumed.

use crate::support;

use std::process::{Command, Output};

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("spillway runs")
}

#[test]
fn explain_prints_the_path_the_limits_and_the_verdict() {
    let (_runtime, running) = support::server(
        "explain",
        "domain: e\ndescriptors:\n  - key: user\n    limits:\n      - { name: hourly, algorithm: sliding_log, limit: 2, window: 1h }\n",
    );
    let http = format!("http://{}", running.http_addr);
    let admin = format!("http://{}", running.admin_addr.unwrap());
    let explain = |args: &[&str]| {
        spillway(&[&["explain", "--server", &admin, "--domain", "e"], args].concat())
    };
    let check = |user: &str| spillway(&["check", "--server", &http, "--domain", "e", user]);

    assert_eq!(check("user=u1").status.code(), Some(0));
    let out = explain(&["user=u1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("domain e: a check would be ADMITTED"),
        "{text}"
    );
    assert!(text.contains("entry 0 → node `user` (any value)"), "{text}");
    assert!(
        text.contains("`hourly`: sliding_log 2 per 1h, 1 left"),
        "{text}"
    );
    // Explaining twice consumed nothing: one more check is admitted, then none.
    explain(&["user=u1"]);
    assert_eq!(check("user=u1").status.code(), Some(0));
    let out = explain(&["--json", "user=u1"]);
    assert_eq!(out.status.code(), Some(1), "limited now: {out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["denied_by"]["rule"], "hourly");
    assert_eq!(v["descriptors"][0]["limits"][0]["state"]["remaining"], 0);
    let text = String::from_utf8(explain(&["user=u1"]).stdout).unwrap();
    assert!(
        text.contains("LIMITED by `hourly`") && text.contains("would deny"),
        "{text}"
    );

    let text = String::from_utf8(explain(&["usr=x"]).stdout).unwrap();
    assert!(
        text.contains("no limit applies: entry 0 matches no node; the closest is `user`"),
        "{text}"
    );

    let out = spillway(&[
        "explain",
        "--server",
        "http://127.0.0.1:1",
        "--domain",
        "e",
        "a=b",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach"),
        "{out:?}"
    );
}

/// With `admin_token_file` set, `explain` sends the token from `--token-file` or
/// `SPILLWAY_ADMIN_TOKEN`; without one, or with a wrong one, it says how to give it.
#[test]
fn explain_sends_the_admin_token_from_a_file_or_the_environment() {
    let (_runtime, running) = support::server_with(
        "explain-token",
        "domain: e\ndescriptors:\n  - key: user\n    limits:\n      - { algorithm: gcra, limit: 5, window: 1s }\n",
        |c| c.admin.token = Some(spillway_redis::Password::new("s3cret")),
    );
    let dir = support::tempdir("explain-token-files");
    let (good, bad) = (dir.join("token"), dir.join("wrong"));
    std::fs::write(&good, "s3cret\n").unwrap();
    std::fs::write(&bad, "guess\n").unwrap();
    let admin = format!("http://{}", running.admin_addr.unwrap());
    let explain = |extra: &[&str], env: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway"));
        cmd.args(["explain", "--server", &admin, "--domain", "e"])
            .args(extra)
            .arg("user=u1")
            .env_remove("SPILLWAY_ADMIN_TOKEN");
        if let Some(token) = env {
            cmd.env("SPILLWAY_ADMIN_TOKEN", token);
        }
        let out = cmd.output().expect("spillway runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };

    let (code, text) = explain(&[], None);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("answered 401") && text.contains("--token-file FILE or SPILLWAY_ADMIN_TOKEN"),
        "{text}"
    );
    let file = good.display().to_string();
    let (code, text) = explain(&["--token-file", &file], None);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.starts_with("domain e: a check would be ADMITTED"),
        "{text}"
    );
    let (code, text) = explain(&[], Some("s3cret"));
    assert_eq!(code, Some(0), "{text}");

    let wrong = bad.display().to_string();
    let (code, text) = explain(&["--token-file", &wrong], None);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("the token given was refused"), "{text}");
    let missing = dir.join("absent").display().to_string();
    let (code, text) = explain(&["--token-file", &missing], None);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--token-file: cannot read secret file"),
        "{text}"
    );
}
