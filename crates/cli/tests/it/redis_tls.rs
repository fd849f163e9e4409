//! `spillway` on Redis as people run it: over TLS with client certificates (the shared
//! TLS standalone server, Cluster and Sentinel) the service answers gRPC and
//! `/v1/check` as on plaintext and admits exactly an exact limit; and no output — log
//! line, error, `/v1/config`, `/metrics` — ever shows a Redis password.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use spillway_testkit::redis::{
    RedisServer, tls_cluster_url, tls_sentinel_url, tls_standalone_url, unique_prefix,
};
use support::{FakeClock, Procs, curl, free_port, tempdir};

const POLICY: &str = "\
domain: tls
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100 }
";

/// The shared TLS servers' files as `--redis-tls-*` flags.
fn tls_flags() -> Vec<String> {
    let f = spillway_testkit::tls::shared_files();
    let p = |p: &Path| p.display().to_string();
    vec![
        "--redis-tls-ca".into(),
        p(&f.ca),
        "--redis-tls-cert".into(),
        p(&f.client.cert),
        "--redis-tls-key".into(),
        p(&f.client.key),
    ]
}

/// `spillway serve` on POLICY and `store` with `extra` flags and `env`: the child, its
/// HTTP and gRPC ports, and every log line it wrote (read on a thread until it exits).
fn serve(
    store: &str,
    extra: &[String],
    env: &[(&str, &str)],
) -> (
    std::process::Child,
    u16,
    u16,
    std::sync::mpsc::Receiver<String>,
) {
    let dir = tempdir(&format!("tls-{}", free_port()));
    std::fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    let (http, grpc) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("serve")
        .arg("--config")
        .arg(&dir)
        .args([
            "--store",
            store,
            "--store-timeout",
            "2s",
            "--log-level",
            "debug",
        ])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
        .args(extra)
        .env_clear()
        .env("SPILLWAY_ADMIN_ADDR", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let _ = lines.send(line.unwrap());
        }
    });
    (child, http, grpc, received)
}

/// Log lines until one contains `what` (or the log ends): all of them.
fn until(logs: &std::sync::mpsc::Receiver<String>, what: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for line in logs.iter() {
        let done = line.contains(what);
        seen.push(line);
        if done {
            break;
        }
    }
    seen
}

#[test]
fn serve_answers_grpc_and_http_over_tls_and_admits_exactly_the_limit() {
    for url in [tls_standalone_url(), tls_cluster_url(), tls_sentinel_url()] {
        let prefix = unique_prefix("tls-serve");
        let mut flags = tls_flags();
        // Each run counts apart, under its own prefix.
        flags.extend(["--settings".into(), {
            let dir = tempdir(&format!("tls-settings-{}", free_port()));
            let file = dir.join("spillway.yaml");
            std::fs::write(&file, format!("key_prefix: \"{prefix}\"\n")).unwrap();
            file.display().to_string()
        }]);
        // Its clock at the next hour: the 150 requests below count in one hour window.
        let clock = FakeClock::next_hour();
        let (child, http_port, grpc_port, logs) = serve(&url, &flags, &clock.env());
        let _procs = Procs(vec![child]);
        let log = until(&logs, "listening");
        assert!(
            log.iter().any(|l| l.contains("listening")),
            "{url}: {log:#?}"
        );

        // gRPC, as Envoy asks.
        let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args([
                "check",
                "--server",
                &format!("grpc://127.0.0.1:{grpc_port}"),
            ])
            .args(["--domain", "tls", "user=grpc"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{url}: {:?}", out);

        // 150 requests at once on one user against 100 an hour: exactly 100 admitted.
        let body = r#"{"domain":"tls","descriptors":[{"entries":[{"key":"user","value":"hot"}]}]}"#;
        let answers: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..150)
                .map(|_| s.spawn(|| curl(http_port, "/v1/check", Some(body))))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let admitted = answers.iter().filter(|a| a.starts_with("200 ")).count();
        let denied = answers.iter().filter(|a| a.starts_with("429 ")).count();
        assert_eq!((admitted, denied), (100, 50), "{url}: {:?}", &answers[..3]);
    }
}

#[test]
fn check_and_bench_speak_tls() {
    let url = tls_standalone_url();
    let prefix = unique_prefix("tls-check");
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--store", &url, "--prefix", &prefix])
        .args(tls_flags())
        .args([
            "--algorithm",
            "gcra",
            "--limit",
            "3",
            "--window",
            "1m",
            "k1",
        ])
        .env_clear()
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout.contains("2 of 3 remaining"), "{stdout}");

    // The flags are needed: without a client certificate Redis refuses, and says so.
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args([
            "check",
            "--store",
            &url,
            "--algorithm",
            "gcra",
            "--limit",
            "3",
        ])
        .args(["--window", "1m", "k1"])
        .env_clear()
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("not signed by a CA this store trusts"),
        "{stderr}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["bench", "--store", &url])
        .args(tls_flags())
        .args(["--algorithm", "gcra", "--limit", "1000", "--window", "1s"])
        .args(["--keys", "100", "--duration", "1s", "--json"])
        .env_clear()
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["errors"].as_u64(), Some(0), "{stdout}");
}

#[test]
fn no_output_shows_a_redis_password() {
    const SECRET: &str = "Sup3r-Secret-Redis-Pw";
    let server = RedisServer::start_with(&["--requirepass", SECRET]);
    let port = server.port();
    let outputs: std::cell::RefCell<Vec<(String, String)>> = Default::default();
    let run = |what: &str, args: &[&str], env: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.borrow_mut().push((what.to_owned(), text.clone()));
        (out.status.code(), text)
    };
    let check = ["--algorithm", "gcra", "--limit", "3", "--window", "1m", "k"];

    // Wrong passwords in every URL form: one line saying what is wrong, exit 2.
    let wrong = format!("{SECRET}-but-wrong");
    for store in [
        format!("redis://:{wrong}@127.0.0.1:{port}"),
        format!("redis://default:{wrong}@127.0.0.1:{port}"),
        format!("rediss://user:{wrong}@127.0.0.1:{port}"),
        format!("redis+cluster://user:{wrong}@127.0.0.1:{port},127.0.0.1:1"),
        format!("redis+sentinel://user:{wrong}@127.0.0.1:1,127.0.0.1:2/master"),
        format!("mongodb://user:{wrong}@x:1"),
    ] {
        let mut args = vec!["check", "--store", &store, "--timeout", "500ms"];
        args.extend(check);
        let (code, text) = run(&store, &args, &[]);
        assert_eq!(code, Some(2), "{text}");
    }
    // The right one, from a file: in neither argv nor the environment.
    let dir = tempdir("password");
    let file = dir.join("redis-password");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let file_arg = file.display().to_string();
    let mut args = vec!["check", "--store", &url, "--redis-password-file", &file_arg];
    args.extend(check);
    let (code, text) = run("password file", &args, &[]);
    assert_eq!(code, Some(0), "{text}");

    // serve, as the reference is deployed: REDIS_AUTH in the environment.
    let reference = [("REDIS_AUTH", SECRET), ("REDIS_SENTINEL_AUTH", SECRET)];
    let admin_port = free_port();
    let admin = vec!["--admin-addr".to_owned(), format!("127.0.0.1:{admin_port}")];
    let (child, http_port, _, logs) = serve(&url, &admin, &reference);
    let mut procs = Procs(vec![child]);
    let mut seen = until(&logs, "listening");
    for (port, path) in [
        (admin_port, "/v1/config"),
        (admin_port, "/rlconfig"),
        (http_port, "/metrics"),
        (http_port, "/healthz"),
        (http_port, "/readyz"),
    ] {
        let answer = curl(port, path, None);
        assert!(answer.starts_with("200"), "{path}: {answer}");
        outputs.borrow_mut().push((path.into(), answer));
    }
    let body = r#"{"domain":"tls","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}"#;
    let answer = curl(http_port, "/v1/check", Some(body));
    outputs.borrow_mut().push(("/v1/check".into(), answer));
    let _ = Command::new("kill")
        .args(["-TERM", &procs.0[0].id().to_string()])
        .status();
    procs.0[0].wait().unwrap();
    seen.extend(logs.iter());
    outputs
        .borrow_mut()
        .push(("serve's log".into(), seen.join("\n")));

    // And with the wrong REDIS_AUTH: it exits, saying why.
    let wrong_env = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &*format!("127.0.0.1:{port}")),
        ("REDIS_AUTH", &*wrong),
    ];
    let dir = tempdir("password-serve");
    std::fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    let config = dir.display().to_string();
    let (code, text) = run(
        "serve, wrong REDIS_AUTH",
        &[
            "serve",
            "--config",
            &config,
            "--http-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "off",
        ],
        &wrong_env,
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("password is wrong"), "{text}");

    let outputs = outputs.into_inner();
    for (what, text) in &outputs {
        assert!(!text.contains(SECRET), "{what} shows the password:\n{text}");
        assert!(!text.contains("panicked"), "{what} panicked:\n{text}");
    }
    assert!(outputs.len() >= 13, "every output was looked at");
}
