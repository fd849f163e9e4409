//! What Envoy Gateway gives its rate limit service: its Envoy's configuration, its rules
//! (sent over xDS) and its statsd mapping.

/// Envoy Gateway's Envoy, as far as the rate limit goes: TLS to the service, domain
/// `default/eg/http`, per route the descriptor chains Envoy Gateway generates.
pub(super) const GATEWAY_ENVOY: &str = r#"
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
                        # An LLM route as Envoy AI Gateway charges it: a hit on the request
                        # path, and the tokens the response used (`x-charge`) when the
                        # stream is done.
                        - match: { prefix: "/c" }
                          route: { cluster: app }
                          typed_per_filter_config:
                            envoy.filters.http.ratelimit:
                              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                              rate_limits:
                                - actions:
                                    - generic_key: { descriptor_key: "httproute/default/api/rule/2", descriptor_value: "httproute/default/api/rule/2" }
                                    - header_value_match:
                                        descriptor_key: rule-2-match-0
                                        descriptor_value: rule-2-match-0
                                        headers: [{ name: x-user, string_match: { exact: one } }]
                                - actions:
                                    - generic_key: { descriptor_key: "httproute/default/api/rule/2", descriptor_value: "httproute/default/api/rule/2" }
                                    - header_value_match:
                                        descriptor_key: rule-2-match-0
                                        descriptor_value: rule-2-match-0
                                        headers: [{ name: x-user, string_match: { exact: one } }]
                                  hits_addend: { format: "%REQ(x-charge)%" }
                                  apply_on_stream_done: true
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
/// (3 an hour) and route 2 (10 an hour), and per client address under route 1 (2 an
/// hour), shadow mode off.
pub(super) fn gateway_rules() -> envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig
{
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
                2,
                vec![D {
                    key: "rule-2-match-0".into(),
                    value: "rule-2-match-0".into(),
                    rate_limit: per_hour(10),
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

/// Envoy Gateway's statsd mapping (its `statsd-exporter-config` ConfigMap, mounted at
/// `/etc/statsd-exporter/conf.yaml` and named by `PROMETHEUS_MAPPER_YAML`): a rule's
/// stats by domain and one or two levels of its path, the calls, the loads; anything
/// else dropped.
pub(super) const GATEWAY_MAPPING: &str = r#"mappings:
  - { match: "ratelimit.service.rate_limit.*.*.near_limit", name: "ratelimit_service_rate_limit_near_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: "ratelimit.service.rate_limit.*.*.over_limit", name: "ratelimit_service_rate_limit_over_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: "ratelimit.service.rate_limit.*.*.total_hits", name: "ratelimit_service_rate_limit_total_hits", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: "ratelimit.service.rate_limit.*.*.within_limit", name: "ratelimit_service_rate_limit_within_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: "ratelimit.service.rate_limit.*.*.*.near_limit", name: "ratelimit_service_rate_limit_near_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: "ratelimit.service.rate_limit.*.*.*.over_limit", name: "ratelimit_service_rate_limit_over_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: "ratelimit.service.rate_limit.*.*.*.total_hits", name: "ratelimit_service_rate_limit_total_hits", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: "ratelimit.service.rate_limit.*.*.*.within_limit", name: "ratelimit_service_rate_limit_within_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: "ratelimit.service.call.should_rate_limit.*", name: "ratelimit_service_should_rate_limit_error", match_metric_type: counter, labels: { err_type: "$1" } }
  - { match: "ratelimit_server.*.total_requests", name: "ratelimit_service_total_requests", match_metric_type: counter, labels: { grpc_method: "$1" } }
  - { match: "ratelimit_server.*.response_time", name: "ratelimit_service_response_time_seconds", timer_type: histogram, labels: { grpc_method: "$1" } }
  - { match: "ratelimit.service.config_load_success", name: "ratelimit_service_config_load_success", match_metric_type: counter }
  - { match: "ratelimit.service.config_load_error", name: "ratelimit_service_config_load_error", match_metric_type: counter }
  - { match: "ratelimit.service.rate_limit.*.*.*.shadow_mode", name: "ratelimit_service_rate_limit_shadow_mode", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: ".", match_type: "regex", action: "drop", name: "dropped" }
"#;
