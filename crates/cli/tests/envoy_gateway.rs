//! Spillway as Envoy Gateway runs its rate limit service: called `ratelimit`, with
//! exactly Envoy Gateway's environment (no `HOST`, `PORT` or `DEBUG_PORT` of the test's
//! own: it runs in a network namespace of its own, where the fixed ports are free, and is
//! reached over a veth pair from another address, as the kubelet and the gateway reach
//! its pod), its rules over xDS from an ADS server made as Envoy Gateway's (at
//! `envoy-gateway:18001`), and a real Envoy asking it over TLS with Envoy Gateway's
//! descriptor chains.

mod support;

use std::path::Path;
use std::time::Duration;

use support::envoy::{envoy, get, upstream};
use support::netns::Netns;
use support::{curl_at, tempdir};

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
/// limit container (only its files moved to this test's), its rules from an ADS server
/// run here as Envoy Gateway's (mutual TLS, RSA PKCS#1 certificates without EKU): ready
/// before the rules arrive, `/healthcheck` answered on :8080 from outside the namespace
/// as the kubelet probes it, no variable named as not honoured, `/rlconfig` on :6070
/// from inside (as `kubectl port-forward` arrives) and Prometheus on :19001 where Envoy
/// Gateway looks, and a real Envoy over TLS to :8081 limited by the rules that came by
/// xDS.
#[test]
fn envoy_gateways_environment_and_rules_over_xds() {
    use spillway_testkit::ads::{Ads, Snapshot};
    use tokio::sync::{mpsc, watch};
    // `envoy-gateway` is this side of the pair, as Envoy Gateway's Service name resolves
    // in its cluster.
    let ns = Netns::new(&["{host} envoy-gateway"]);
    let dir = tempdir(&format!("envoy-gateway-{}", ns.name));
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
        let listener = tokio::net::TcpListener::bind((ns.host, 18001))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Ads::new(snapshot, requests_tx).router().into_axum_router();
        let stop = tokio_util::sync::CancellationToken::new();
        spillway_server::listen::spawn_mutual_tls(listener, router, files, "ads", stop).unwrap();
        addr
    });

    let path = |p: &Path| p.display().to_string();
    let env: Vec<(&str, String)> = vec![
        ("RUNTIME_ROOT", path(&dir)),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("LOG_LEVEL", "info".into()),
        ("USE_STATSD", "false".into()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001".into()),
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
        ("PROMETHEUS_ADDR", ":19001".into()),
    ];
    assert_eq!(ads_addr.port(), 18001);
    // Started as Envoy Gateway starts it: the command `/bin/ratelimit`, no arguments.
    let (mut procs, startup) = ns.start_ratelimit(&dir, &env);
    assert!(
        !startup.iter().any(|l| l.contains("not honoured")),
        "every variable Envoy Gateway sets is honoured: {startup:#?}"
    );
    let listening = startup.last().unwrap();
    assert!(listening.contains("http_addr=0.0.0.0:8080"), "{listening}");
    // Ready (the probes' path) before any rule arrived, from outside the namespace.
    assert_eq!(curl_at(ns.addr, 8080, "/healthcheck", None), "200 OK");

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
    // The admin listener, from inside the namespace (as `kubectl port-forward` arrives).
    let out = ns
        .command("curl")
        .args(["-sS", "http://127.0.0.1:6070/rlconfig"])
        .output()
        .expect("curl runs");
    let rlconfig = String::from_utf8_lossy(&out.stdout);
    assert!(
        rlconfig.contains(
            "default/eg/http.httproute/default/api/rule/0_httproute/default/api/rule/0.rule-0-match-0_rule-0-match-0: unit=HOUR requests_per_unit=3, shadow_mode: false"
        ),
        "{rlconfig}"
    );

    let config = GATEWAY_ENVOY
        .replace(
            "{ address: 127.0.0.1, port_value: 8081 }",
            &format!("{{ address: {}, port_value: 8081 }}", ns.addr),
        )
        .replace("CLIENT_CERT", &path(&certs.client.cert))
        .replace("CLIENT_KEY", &path(&certs.client.key))
        .replace("CA_CERT", &path(&certs.ca));
    let port = envoy(&mut procs, &config, 8081, upstream());
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

    let metrics = curl_at(ns.addr, 19001, "/metrics", None);
    assert!(
        metrics.contains("spillway_decisions_total{domain=\"default/eg/http\""),
        "{metrics}"
    );
}
