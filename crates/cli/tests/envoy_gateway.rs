//! Spillway as Envoy Gateway runs its rate limit service: called `ratelimit`, with
//! Envoy Gateway's environment, its rules over xDS from an ADS server made as Envoy
//! Gateway's, and a real Envoy asking it over TLS with Envoy Gateway's descriptor chains.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::envoy::{envoy, get, upstream};
use support::{Procs, free_port, tempdir};

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
        let files = spillway_server::tls::TlsFiles {
            cert: certs.server.cert.clone(),
            key: certs.server.key.clone(),
            client_ca: Some(certs.ca.clone()),
            client_sans: Vec::new(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Ads::new(snapshot, requests_tx).router().into_axum_router();
        let stop = tokio_util::sync::CancellationToken::new();
        spillway_server::listen::spawn_mutual_tls(listener, router, files, "ads", stop).unwrap();
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
