//! `spillway serve` over TLS, as processes: `check` and `bench` speak `grpcs://` and
//! `https://` with `--ca-file`, `--client-cert`, `--client-key`; the certificate, key
//! and client CA rotate under a `bench --server grpcs://` load with no request failing;
//! SIGHUP reloads; the reference's variables put TLS on gRPC and refuse to start
//! without a certificate, never serving plaintext.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use spillway_testkit::metric;
use spillway_testkit::tls::{
    Leaf, Pair, Pki, certificate_der as der, client_config, https, presented, replace,
};
use support::{Procs, free_port, spawn_serve, tempdir, until_listening};

const POLICY: &str = "domain: t\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n";

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .env_clear()
        .output()
        .expect("spillway runs")
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The certificate a new handshake on `port` presents (DER).
fn served(port: u16, ca: &Path, client: &Pair) -> Vec<u8> {
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(presented(addr, client_config(ca, Some(client), &[])))
}

fn reloads(metrics: &str) -> u64 {
    metric(metrics, "spillway_tls_reloads_total{result=\"success\"}")
}

/// `GET path` over TLS on `port`: status and body.
fn get(port: u16, path: &str, ca: &Path, client: &Pair) -> (u16, String) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        https(addr, client_config(ca, Some(client), &[]), "GET", path, "")
            .await
            .unwrap()
    })
}

/// Polls `done` every 20 ms for up to 10 s.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    (0..500).any(|_| {
        let ok = done();
        if !ok {
            std::thread::sleep(Duration::from_millis(20));
        }
        ok
    })
}

#[test]
fn check_and_bench_speak_tls_and_certificates_rotate_under_load() {
    let (old, new) = (Pki::new("cli-old"), Pki::new("cli-new"));
    let dir = tempdir(&format!("serve-tls-{}", free_port()));
    std::fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    // The files serve reads: replaced in place, as Kubernetes swaps a mounted secret.
    let live = Pair {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    let client_ca = dir.join("clients.crt");
    let (first, second) = (
        old.issue("first", Leaf::Good),
        old.issue("second", Leaf::Good),
    );
    replace(&live.cert, &first.cert);
    replace(&live.key, &first.key);
    replace(&client_ca, &old.ca());
    let (old_client, new_client) = (
        old.issue("client", Leaf::Good),
        new.issue("client", Leaf::Good),
    );
    let ca = old.ca(); // the servers' certificates are all from the old CA

    let (http, grpc) = (free_port(), free_port());
    let serve = spawn_serve([
        "--config".to_owned(),
        path(&dir),
        "--http-addr".into(),
        format!("127.0.0.1:{http}"),
        "--grpc-addr".into(),
        format!("127.0.0.1:{grpc}"),
        "--tls-cert".into(),
        path(&live.cert),
        "--tls-key".into(),
        path(&live.key),
        "--tls-client-ca".into(),
        path(&client_ca),
    ]);
    let procs = Procs(vec![serve]);

    let (ca_arg, cert_arg, key_arg) = (path(&ca), path(&old_client.cert), path(&old_client.key));
    let tls_flags = [
        "--ca-file",
        &ca_arg,
        "--client-cert",
        &cert_arg,
        "--client-key",
        &key_arg,
    ];
    let grpcs = format!("grpcs://127.0.0.1:{grpc}");
    let https_url = format!("https://127.0.0.1:{http}");
    for server in [&grpcs, &https_url] {
        let out = spillway(
            &[
                &["check", "--server", server, "--domain", "t", "user=u1"][..],
                &tls_flags,
            ]
            .concat(),
        );
        assert_eq!(out.status.code(), Some(0), "{server}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("user=u1: allowed"),
            "{out:?}"
        );
        // Without a client certificate: refused, one line saying so.
        let out = spillway(&[
            "check",
            "--server",
            server,
            "--ca-file",
            &ca_arg,
            "--domain",
            "t",
            "u",
        ]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{server} without a certificate: {out:?}"
        );
    }
    // Plaintext to a TLS port, and TLS flags on a plaintext URL: errors.
    let plain = format!("grpc://127.0.0.1:{grpc}");
    let out = spillway(&["check", "--server", &plain, "--domain", "t", "u"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = spillway(
        &[
            &["check", "--server", &plain, "--domain", "t", "u"][..],
            &tls_flags,
        ]
        .concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("need grpcs:// or https://"), "{err}");

    // Rotation under load: bench runs while the pair and the client CA change.
    let bench = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args([
            "bench",
            "--server",
            &grpcs,
            "--domain",
            "t",
            "--key-name",
            "user",
        ])
        .args(["--concurrency", "8", "--duration", "4s", "--json"])
        .args(tls_flags)
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The rotation happens under the load: once the service has answered its requests.
    let grpc_requests = || {
        let metrics = get(http, "/metrics", &ca, &old_client).1;
        metric(&metrics, "spillway_requests_total{api=\"grpc\"}")
    };
    let before_load = grpc_requests();
    assert!(
        eventually(|| grpc_requests() > before_load + 100),
        "the load runs"
    );
    replace(&live.key, &second.key);
    replace(&live.cert, &second.cert);
    assert!(
        eventually(|| served(grpc, &ca, &old_client) == der(&second.cert)),
        "a handshake after the change presents the new certificate"
    );
    // The client CA becomes a bundle of the old and the new.
    let bundle = dir.join("bundle.pem");
    std::fs::write(
        &bundle,
        [
            std::fs::read_to_string(old.ca()).unwrap(),
            std::fs::read_to_string(new.ca()).unwrap(),
        ]
        .concat(),
    )
    .unwrap();
    replace(&client_ca, &bundle);
    assert!(
        eventually(|| {
            let addr = format!("127.0.0.1:{http}").parse().unwrap();
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                https(
                    addr,
                    client_config(&ca, Some(&new_client), &[]),
                    "GET",
                    "/healthz",
                    "",
                )
                .await
                .is_ok()
            })
        }),
        "a client of the new CA is accepted"
    );
    let out = bench.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["errors"], 0,
        "no request failed across the rotation: {report}"
    );
    assert!(report["admitted"].as_u64().unwrap() > 100, "{report}");

    // SIGHUP reloads (nothing changed: the same pair is loaded again, and counted).
    let metrics = || get(http, "/metrics", &ca, &old_client).1;
    let before = reloads(&metrics());
    let status = Command::new("kill")
        .args(["-HUP", &procs.0[0].id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        eventually(|| reloads(&metrics()) > before),
        "SIGHUP reloaded"
    );
    assert_eq!(served(grpc, &ca, &old_client), der(&second.cert));
}

#[test]
fn the_reference_variables_serve_grpc_over_tls_and_never_plaintext() {
    let pki = Pki::new("cli-reference");
    let server = pki.issue("server", Leaf::Good);
    let dir = tempdir(&format!("serve-tls-ref-{}", free_port()));
    std::fs::create_dir_all(dir.join("ratelimit/config")).unwrap();
    std::fs::write(dir.join("ratelimit/config/policy.yaml"), POLICY).unwrap();
    let (http, grpc) = (free_port(), free_port());
    let env = |tls: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spillway"));
        cmd.arg("serve")
            .env_clear()
            .env("RUNTIME_ROOT", &dir)
            .env("RUNTIME_SUBDIRECTORY", "ratelimit")
            .env("HOST", "127.0.0.1")
            .env("PORT", http.to_string())
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", grpc.to_string())
            .env("DEBUG_PORT", free_port().to_string())
            .env("GRPC_SERVER_USE_TLS", "true");
        if tls {
            cmd.env("GRPC_SERVER_TLS_CERT", &server.cert)
                .env("GRPC_SERVER_TLS_KEY", &server.key);
        }
        cmd
    };
    // No certificate: refused, never plaintext.
    let out = env(false).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to serve plaintext"), "{err}");
    assert!(!err.contains("not honoured"), "{err}");

    let mut child = env(true)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let seen = until_listening(&mut child);
    let _procs = Procs(vec![child]);
    assert!(
        !seen.iter().any(|l| l.contains("GRPC_SERVER")),
        "no GRPC_SERVER_* variable is named as not honoured: {seen:#?}"
    );
    // gRPC over TLS; the HTTP port stays plaintext, for Kubernetes' probes.
    let ca = path(&pki.ca());
    let grpcs = format!("grpcs://127.0.0.1:{grpc}");
    let out = spillway(&[
        "check",
        "--server",
        &grpcs,
        "--ca-file",
        &ca,
        "--domain",
        "t",
        "user=u1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let health = support::curl(http, "/healthcheck", None);
    assert!(health.starts_with("200 OK"), "{health}");
}
