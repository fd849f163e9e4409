//! Spillway started as its image starts it — the command `ratelimit`, the settings in the
//! reference's variables, no `HOST`, `PORT`, `GRPC_HOST` or `GRPC_PORT` — is reached on
//! its fixed ports from another address, as `docker run -p 8080:8080 -p 8081:8081` and a
//! kubelet reach a container (issue #36: it listened on loopback only, answering
//! nobody). It runs in a network namespace of the test's own (the fixed ports are free
//! there) and is asked over a veth pair.

use crate::support;

use std::process::Command;

use support::netns::Netns;
use support::{FakeClock, curl_at, tempdir};

const POLICY: &str = "\
domain: image
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1 }
";

/// A directory laid out as the Dockerfile's `docker run` mounts it (`POLICY` in
/// `ratelimit/config`), and that example's environment: `RUNTIME_ROOT` and
/// `RUNTIME_SUBDIRECTORY`, nothing else but a test clock.
fn image(name: &str) -> (std::path::PathBuf, Vec<(&'static str, String)>) {
    let dir = tempdir(name);
    std::fs::create_dir_all(dir.join("ratelimit/config")).unwrap();
    std::fs::write(dir.join("ratelimit/config/image.yaml"), POLICY).unwrap();
    let mut env = vec![
        ("RUNTIME_ROOT", dir.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
    ];
    // Its clock at the next hour: the test's second request must find the first's hour
    // window, however long a busy machine takes between them.
    let clock = FakeClock::next_hour();
    env.extend(clock.env().into_iter().map(|(k, v)| (k, v.to_owned())));
    (dir, env)
}

/// One `ShouldRateLimit` over plaintext gRPC to `server`, asked with `spillway check`
/// from this namespace: its first line.
fn grpc_check(server: &str, user: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["check", "--server", server, "--domain", "image", user])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.is_empty(), "{out:?}");
    text.lines().next().unwrap_or("").to_owned()
}

/// The Dockerfile's `docker run` example: `RUNTIME_ROOT` and `RUNTIME_SUBDIRECTORY`, and
/// nothing else.
#[test]
fn the_image_started_as_docker_run_starts_it_answers_from_outside() {
    let Some(ns) = Netns::or_skip(
        "the_image_started_as_docker_run_starts_it_answers_from_outside",
        &[],
    ) else {
        return;
    };
    let (dir, env) = image(&format!("deployed-{}", ns.name));
    let (_serve, log) = ns.start_ratelimit(&dir, &env);
    let listening = log.last().unwrap();
    assert!(listening.contains("http_addr=0.0.0.0:8080"), "{listening}");
    assert!(listening.contains("grpc_addr=0.0.0.0:8081"), "{listening}");

    assert_eq!(curl_at(ns.addr, 8080, "/healthcheck", None), "200 OK");
    let body = r#"{"domain":"image","descriptors":[{"entries":[{"key":"user","value":"http"}]}]}"#;
    assert!(curl_at(ns.addr, 8080, "/json", Some(body)).starts_with("200 "));
    assert!(curl_at(ns.addr, 8080, "/json", Some(body)).starts_with("429 "));
    let grpc = format!("grpc://{}:8081", ns.addr);
    assert!(grpc_check(&grpc, "user=grpc").starts_with("user=grpc: allowed"));
    assert!(grpc_check(&grpc, "user=grpc").starts_with("user=grpc: denied"));
    // The admin pages stay on the namespace's loopback: not reachable from outside.
    assert!(
        std::net::TcpStream::connect_timeout(
            &(ns.addr, 6070).into(),
            std::time::Duration::from_secs(2)
        )
        .is_err()
    );
}

/// The reference reads `GRPC_SERVER_TLS_CERT` and `_KEY` only with
/// `GRPC_SERVER_USE_TLS=true`; without it both ports serve plaintext (a kubelet's plain
/// probe included), and the log names the variables as not honoured.
#[test]
fn a_certificate_without_use_tls_serves_plaintext_as_the_reference_does() {
    let Some(ns) = Netns::or_skip(
        "a_certificate_without_use_tls_serves_plaintext_as_the_reference_does",
        &[],
    ) else {
        return;
    };
    let (dir, mut env) = image(&format!("deployed-tls-{}", ns.name));
    let certs = spillway_testkit::tls::envoy_gateway_certs(&dir);
    env.push((
        "GRPC_SERVER_TLS_CERT",
        certs.server.cert.display().to_string(),
    ));
    env.push((
        "GRPC_SERVER_TLS_KEY",
        certs.server.key.display().to_string(),
    ));
    let (_serve, log) = ns.start_ratelimit(&dir, &env);
    let listening = log.last().unwrap();
    assert!(listening.contains("tls=none"), "{listening}");
    for variable in ["GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY"] {
        assert!(
            log.iter()
                .any(|l| l.contains("not honoured") && l.contains(variable)),
            "{variable} is named: {log:#?}"
        );
    }
    assert_eq!(curl_at(ns.addr, 8080, "/healthcheck", None), "200 OK");
    let grpc = format!("grpc://{}:8081", ns.addr);
    assert!(grpc_check(&grpc, "user=plain").starts_with("user=plain: allowed"));
}
