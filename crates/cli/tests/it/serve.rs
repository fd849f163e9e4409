//! `spillway serve` as a real process: configured the way a deployment of the Envoy
//! reference service is (its environment variables and directory layout), answering
//! over HTTP, logging JSON, and stopping cleanly on SIGTERM; and the keys it writes to
//! Redis (`cargo test -p spillway --release --test it -- --nocapture service_keys`
//! prints the table of their sizes that docs/performance.md quotes).

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use spillway_testkit::liar::{Liar, Lie};
use spillway_testkit::redis::RedisServer;
use support::{curl, free_port, spawn_serve};

mod keys;
mod logs;
mod waits;

#[test]
fn serve_honours_the_reference_environment_and_stops_on_sigterm() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("serve-{}", std::process::id()));
    let config = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&config).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/envoy/rl.yaml");
    std::fs::copy(example, config.join("rl.yaml")).unwrap();
    let (http, grpc, admin) = (free_port(), free_port(), free_port());

    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("serve")
        .env_clear()
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", admin.to_string())
        .env("RUNTIME_ROOT", &root)
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("HOST", "127.0.0.1")
        .env("PORT", http.to_string())
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", grpc.to_string())
        .env("LOG_FORMAT", "json")
        .env("LOG_LEVEL", "info")
        .env("LIMIT_RESPONSE_HEADERS_ENABLED", "true")
        .env("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")
        .env("RESPONSE_DYNAMIC_METADATA", "true")
        // Read by the reference, not by Spillway: each is named in one warning.
        .env("REDIS_POOL_SIZE", "20")
        .env("EXPIRATION_JITTER_MAX_SECONDS", "60")
        // Honoured (no statsd, so STATSD_HOST is not read, as in the reference): not named.
        .env("USE_STATSD", "false")
        .env("STATSD_HOST", "statsd")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spillway starts");
    let _kill = support::KillOnDrop(child.id());
    let mut logs = BufReader::new(child.stderr.take().unwrap()).lines();
    // Wait for the line that says it listens, rather than guessing how long that takes.
    let mut before = Vec::new();
    let listening = loop {
        let line = logs.next().expect("a listening line").unwrap();
        if line.contains("listening") {
            break line;
        }
        before.push(line);
    };
    for variable in ["REDIS_POOL_SIZE", "EXPIRATION_JITTER_MAX_SECONDS"] {
        let warnings: Vec<&String> = before
            .iter()
            .filter(|l| l.contains("WARN") && l.contains(&format!("\"variable\":\"{variable}\"")))
            .collect();
        assert_eq!(
            warnings.len(),
            1,
            "one warning naming {variable} in {before:#?}"
        );
    }
    // The reference's defaults not taken, of the variables not set, in one line.
    let defaults: Vec<&String> = before
        .iter()
        .filter(|l| l.contains("the reference's defaults Spillway does not take"))
        .collect();
    assert_eq!(defaults.len(), 1, "{before:#?}");
    assert!(
        defaults[0].contains("REDIS_TIMEOUT=10s") && !defaults[0].contains("LOG_LEVEL"),
        "{defaults:?}"
    );
    for honoured in [
        "USE_STATSD",
        "STATSD_HOST",
        "RUNTIME_ROOT",
        "STOP_CACHE_KEY",
        "RESPONSE_DYNAMIC_METADATA",
    ] {
        assert!(
            !before.iter().any(|l| l.contains(honoured)),
            "{honoured} is honoured: not named"
        );
    }
    let line: serde_json::Value = serde_json::from_str(&listening).expect("JSON logs");
    assert_eq!(line["fields"]["http_addr"], format!("127.0.0.1:{http}"));

    let body = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"bar"}]}]}"#;
    let answers: Vec<String> = (0..3).map(|_| curl(http, "/json", Some(body))).collect();
    assert!(answers[0].starts_with("200 "), "{}", answers[0]);
    assert!(
        answers[0].contains(r#""responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"2"}"#),
        "{}",
        answers[0]
    );
    assert!(answers[2].starts_with("429 "), "{}", answers[2]);
    // RESPONSE_DYNAMIC_METADATA: the request's part of the metadata comes back.
    assert!(
        answers[0].contains(
            r#""dynamicMetadata":{"descriptors":[{"entries":["foo=bar"]}],"domain":"rl"}"#
        ),
        "{}",
        answers[0]
    );
    assert!(curl(http, "/healthcheck", None).starts_with("200 OK"));

    terminate(&child);
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status}");
    let rest: Vec<String> = logs.map(|l| l.unwrap()).collect();
    assert!(rest.iter().any(|l| l.contains("shutting down")), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}

fn terminate(child: &std::process::Child) {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success(), "kill -TERM {pid}");
}

#[test]
fn a_bad_store_url_or_an_old_redis_fails_at_once_and_an_unreachable_store_is_waited_for() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let serve = |store: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_spillway"));
        c.args(["serve", "--config"])
            .arg(&example)
            .args([
                "--store",
                store,
                "--http-addr",
                "127.0.0.1:0",
                "--grpc-addr",
                "127.0.0.1:0",
                "--admin-addr",
                "off",
            ])
            .env_clear()
            .stderr(Stdio::piped());
        c
    };
    let out = serve("mongodb://x").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: store:"), "{err}");

    // A Redis older than 6.2 (its `INFO server` says 6.0.16): refused at once, saying
    // what it lacks, not waited for.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let old = runtime.block_on(Liar::start_as(Lie::Nil, Some("6.0.16")));
    let out = serve(&old.url()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is too old: it is redis 6.0.16")
            && err.contains("needs Redis 6.2 or later")
            && err.contains("GETDEL"),
        "{err}"
    );

    // Nothing listens on this port: the service waits, logging, until it is stopped.
    let mut child = serve(&format!("redis://127.0.0.1:{}", free_port()))
        .spawn()
        .unwrap();
    let mut logs = BufReader::new(child.stderr.take().unwrap()).lines();
    let waiting = logs
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.contains("store unreachable; waiting for it"));
    assert!(waiting.is_some(), "a line saying it waits for the store");
    terminate(&child);
    assert!(child.wait().unwrap().success());
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (it comes with redis-server)");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_bad_failure_policy_or_header_style_is_refused_by_the_parser() {
    for (flag, value, says) in [
        (
            "--on-store-error",
            "maybe",
            "expected open, closed or local",
        ),
        (
            "--headers",
            "fancy",
            "expected ietf, legacy, x-ratelimit or none",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["serve", flag, value])
            .env_clear()
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains(says), "{err}");
    }
}

/// Starts `spillway serve` on `policies` and `store`, its log read until it exits;
/// returns it and its HTTP port.
fn serve(policies: &Path, store: &str) -> (std::process::Child, u16) {
    serve_with(policies, store, &[])
}

/// [`serve`] with more arguments.
fn serve_with(policies: &Path, store: &str, extra: &[&str]) -> (std::process::Child, u16) {
    let http = free_port();
    let (policies, http_addr) = (policies.to_str().unwrap(), format!("127.0.0.1:{http}"));
    let mut args = vec!["--config", policies, "--store", store];
    args.extend_from_slice(extra);
    args.extend([
        "--http-addr",
        &http_addr,
        "--grpc-addr",
        "127.0.0.1:0",
        // These tests check decisions, not latency, on a machine that may be busy: at
        // the default 10 ms a lease call can time out after Redis has granted it, and
        // its units are lost (a lost answer, not a lost lease bound).
        "--store-timeout",
        "2s",
    ]);
    (spawn_serve(args), http)
}

/// Redis `TIME`'s seconds.
fn redis_secs(port: u16) -> u64 {
    redis_cli(port, &["TIME"])
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn two_servers_sharing_a_lease_admit_at_most_the_limit_and_lose_at_most_their_leases() {
    let redis = RedisServer::start();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lease-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An hour's window, so that a 3 s run almost never spans two (and is checked when it does).
    std::fs::write(
        dir.join("api.yaml"),
        "domain: api\ndescriptors:\n  - key: user\n    limits:\n      \
         - { name: api, algorithm: fixed_window, limit: 1000, window: 1h, lease: 20 }\n",
    )
    .unwrap();
    let servers = [serve(&dir, &redis.url()), serve(&dir, &redis.url())];
    let started = redis_secs(redis.port());
    let benches: Vec<_> = servers
        .iter()
        .map(|(_, http)| {
            Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(["bench", "--server", &format!("http://127.0.0.1:{http}")])
                .args([
                    "--domain",
                    "api",
                    "--key-name",
                    "user",
                    "--hot",
                    "--hot-key",
                    "u1",
                ])
                .args(["--duration", "3s", "--json"])
                .stdout(Stdio::piped())
                .spawn()
                .expect("bench starts")
        })
        .collect();
    let admitted: Vec<u64> = benches
        .into_iter()
        .map(|b| {
            let out = b.wait_with_output().unwrap();
            assert!(out.status.success());
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            report["admitted"].as_u64().unwrap()
        })
        .collect();
    let ended = redis_secs(redis.port());
    for (mut child, _) in servers {
        terminate(&child);
        assert!(child.wait().unwrap().success());
    }
    let total: u64 = admitted.iter().sum();
    println!("admitted {admitted:?}, {total} in all");
    let windows = ended / 3600 - started / 3600 + 1;
    assert!(
        total <= 1000 * windows,
        "{total} admitted in {windows} window(s)"
    );
    assert!(
        total >= 1000 - 2 * 20,
        "{total} admitted: more than 2 leases lost"
    );
}

/// `--candidate-config`: the candidate's decisions reach /metrics, the answers stay the
/// live set's, and /v1/config lists the candidate.
#[test]
fn serve_decides_a_candidate_in_shadow() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cand-{}", std::process::id()));
    let (live, candidate) = (dir.join("live"), dir.join("candidate"));
    for (d, n) in [(&live, 5), (&candidate, 1)] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(
            d.join("api.yaml"),
            format!("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {{ unit: hour, requests_per_unit: {n} }}\n"),
        )
        .unwrap();
    }
    let admin = free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let (mut child, http) = serve_with(
        &live,
        "memory",
        &[
            "--candidate-config",
            candidate.to_str().unwrap(),
            "--admin-addr",
            &admin_addr,
        ],
    );
    let body = r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}"#;
    for _ in 0..3 {
        let answer = curl(http, "/v1/check", Some(body));
        assert!(answer.starts_with("200"), "the live set answers: {answer}");
    }
    let mut metrics = String::new();
    // The candidate runs on idle CPU only: on a busy machine, allow it 30 s.
    for _ in 0..3000 {
        metrics = curl(http, "/metrics", None);
        if metrics.contains("spillway_candidate_disagreements_total") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        metrics.contains("spillway_candidate_decisions_total"),
        "{metrics}"
    );
    assert!(metrics.contains("kind=\"would_deny\""), "{metrics}");
    let config = curl(admin, "/v1/config", None);
    assert!(config.contains("\"candidate\":{"), "{config}");
    terminate(&child);
    assert!(child.wait().unwrap().success());
}
