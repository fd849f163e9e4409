//! Envoy 1.40 asking `spillway serve` over TLS and over mutual TLS, with docs/tls.md's
//! example and a `transport_socket` on the rate limit cluster; and, trusting another CA,
//! `failure_mode_deny` deciding.

use crate::support;

use std::path::Path;

use support::envoy::{envoy, example, get, header, upstream};
use support::{FakeClock, Procs, free_port, spawn_serve_with, tempdir};

/// `spillway serve` over TLS on `policy`, with mutual TLS when `client_ca` is given, its
/// clock at the next hour ([`FakeClock::next_hour`]): the tests count to an hour
/// window's limit, and a window that ended between two steps would reset the count.
fn spillway_tls(
    procs: &mut Procs,
    policy: &str,
    server: &spillway_testkit::tls::Pair,
    client_ca: Option<&Path>,
) -> u16 {
    let dir = tempdir(&format!("envoy-tls-policy-{}", free_port()));
    std::fs::write(dir.join("api.yaml"), policy).unwrap();
    let (http, grpc) = (free_port(), free_port());
    let mut args: Vec<std::ffi::OsString> = vec![
        "--config".into(),
        dir.into_os_string(),
        "--http-addr".into(),
        format!("127.0.0.1:{http}").into(),
        "--grpc-addr".into(),
        format!("127.0.0.1:{grpc}").into(),
        "--tls-cert".into(),
        server.cert.clone().into_os_string(),
        "--tls-key".into(),
        server.key.clone().into_os_string(),
    ];
    if let Some(ca) = client_ca {
        args.extend(["--tls-client-ca".into(), ca.as_os_str().to_owned()]);
    }
    procs
        .0
        .push(spawn_serve_with(args, &FakeClock::next_hour().env()));
    grpc
}

/// The example with TLS to the `spillway` cluster: trusting `ca`, checking that the
/// certificate names `localhost`, presenting `client` when given.
fn example_over_tls(
    ca: &Path,
    client: Option<&spillway_testkit::tls::Pair>,
    failure_mode_deny: bool,
) -> String {
    let identity = client.map_or(String::new(), |c| {
        format!(
            "\n            tls_certificates:\n              - certificate_chain: {{ filename: {} }}\n                private_key: {{ filename: {} }}",
            c.cert.display(),
            c.key.display()
        )
    });
    let transport = format!(
        "explicit_http_config: {{ http2_protocol_options: {{}} }}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          sni: localhost
          common_tls_context:
            alpn_protocols: [h2]{identity}
            validation_context:
              trusted_ca: {{ filename: {} }}
              match_typed_subject_alt_names:
                - san_type: DNS
                  matcher: {{ exact: localhost }}",
        ca.display()
    );
    let config = example()
        .replacen(
            "explicit_http_config: { http2_protocol_options: {} }",
            &transport,
            1,
        )
        .replace(
            "failure_mode_deny: false",
            &format!("failure_mode_deny: {failure_mode_deny}"),
        );
    assert!(config.contains("UpstreamTlsContext"));
    config
}

/// Envoy asks Spillway over TLS, then over mutual TLS (Envoy's `transport_socket` on the
/// rate limit cluster), and limits as over plaintext; Envoy trusting another CA cannot
/// reach it, and `failure_mode_deny` decides: through when false, 500 when true.
#[test]
fn envoy_asks_over_tls_and_mutual_tls() {
    use spillway_testkit::tls::{Leaf, Pki};
    let (pki, other) = (Pki::new("envoy-tls"), Pki::new("envoy-tls-other"));
    let server = pki.issue("server", Leaf::Good);
    let client = pki.issue("envoy", Leaf::Good);
    let policy = "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n";
    let limits = |port: u16, what: &str| {
        for _ in 0..3 {
            assert_eq!(get(port, "/", &[]).0, 200, "{what}");
        }
        let (status, headers) = get(port, "/", &[]);
        assert_eq!(status, 429, "{what}: the fourth request: {headers:?}");
        assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));
    };

    let mut procs = Procs(Vec::new());
    let grpc = spillway_tls(&mut procs, policy, &server, None);
    let port = envoy(
        &mut procs,
        &example_over_tls(&pki.ca(), None, true),
        grpc,
        upstream(),
    );
    limits(port, "TLS");

    let ca = pki.ca();
    let grpc = spillway_tls(&mut procs, policy, &server, Some(&ca));
    let mutual = example_over_tls(&pki.ca(), Some(&client), true);
    let port = envoy(&mut procs, &mutual, grpc, upstream());
    limits(port, "mutual TLS");
    // Without its certificate, Envoy is refused: failure_mode_deny: true answers 500.
    let port = envoy(
        &mut procs,
        &example_over_tls(&pki.ca(), None, true),
        grpc,
        upstream(),
    );
    assert_eq!(get(port, "/", &[]).0, 500, "no client certificate");

    // Envoy trusting another CA: every call fails; failure_mode_deny decides.
    let grpc = spillway_tls(&mut procs, policy, &server, None);
    let open = envoy(
        &mut procs,
        &example_over_tls(&other.ca(), None, false),
        grpc,
        upstream(),
    );
    for _ in 0..5 {
        assert_eq!(
            get(open, "/", &[]).0,
            200,
            "failure_mode_deny: false lets through"
        );
    }
    let closed = envoy(
        &mut procs,
        &example_over_tls(&other.ca(), None, true),
        grpc,
        upstream(),
    );
    assert_eq!(get(closed, "/", &[]).0, 500, "failure_mode_deny: true");
}
