//! Spillway as Envoy Gateway runs its rate limit service: called `ratelimit`, with
//! exactly Envoy Gateway's environment, all of it (no `HOST`, `PORT` or `DEBUG_PORT` of
//! the test's own: it runs in a network namespace of its own, where the fixed ports are
//! free, and is reached over a veth pair from another address, as the kubelet and the
//! gateway reach its pod; `REDIS_URL` names a real Redis across that pair;
//! `PROMETHEUS_MAPPER_YAML` is Envoy Gateway's mapping), its rules over xDS from an ADS
//! server made as Envoy Gateway's (at `envoy-gateway:18001`), and a real Envoy asking it
//! over TLS with Envoy Gateway's descriptor chains. Then Redis goes away for a minute:
//! the health check Envoy Gateway probes stays 200, as the reference's does, unless
//! `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true`.

use crate::support;

use spillway_testkit::prometheus_series as series;

use std::path::Path;
use std::time::Duration;

use spillway_testkit::redis::RedisServer;
use support::envoy::{envoy, get, upstream};
use support::netns::Netns;
use support::{curl_at, tempdir};

mod gateway;

use gateway::{GATEWAY_ENVOY, GATEWAY_MAPPING, gateway_rules};

/// `/healthcheck` on :8080 from outside the namespace, as the kubelet probes it.
fn health(ns: &Netns) -> String {
    curl_at(ns.addr, 8080, "/healthcheck", None)
}

/// Spillway, called `ratelimit` and given exactly the environment Envoy Gateway gives its
/// rate limit container with a Redis backend and Prometheus on (only its files moved to
/// this test's, `REDIS_URL` naming a Redis across the veth pair), its rules from an ADS
/// server run here as Envoy Gateway's (mutual TLS, RSA PKCS#1 certificates without EKU):
/// - no variable named as not honoured, ready before the rules arrive, `/healthcheck`
///   answered on :8080 from outside the namespace, `/rlconfig` on :6070 from inside (as
///   `kubectl port-forward` arrives);
/// - a real Envoy over TLS to :8081 limited by the rules that came by xDS, on Redis;
/// - the reference's series on :19001 as Envoy Gateway's mapping names them, counted in
///   hits (a stream-done charge of 600 across the limit among them);
/// - Redis stopped for 60 s: `/healthcheck` 200 every second of it, Envoy's requests
///   refused by its `failure_mode_deny` (the rules' policy is `closed`), and decided on
///   Redis again once it is back;
/// - started again with `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true`: 500 while Redis is
///   down, 200 once it is back.
#[test]
fn envoy_gateways_environment_and_rules_over_xds() {
    use spillway_testkit::ads::{Ads, Snapshot};
    use tokio::sync::{mpsc, watch};
    // `envoy-gateway` is this side of the pair, as Envoy Gateway's Service name resolves
    // in its cluster; so is the Redis an operator points `REDIS_URL` at.
    let Some(ns) = Netns::or_skip(
        "envoy_gateways_environment_and_rules_over_xds",
        &[
            "{host} envoy-gateway",
            "{host} redis.redis-system.svc.cluster.local",
        ],
    ) else {
        return;
    };
    let dir = tempdir(&format!("envoy-gateway-{}", ns.name));
    let certs = spillway_testkit::tls::envoy_gateway_certs(&dir);
    let mut redis = RedisServer::start_with(&[
        "--bind",
        &format!("127.0.0.1 {}", ns.host),
        "--protected-mode",
        "no",
    ]);
    let mapping = dir.join("statsd-exporter/conf.yaml");
    std::fs::create_dir_all(mapping.parent().unwrap()).unwrap();
    std::fs::write(&mapping, GATEWAY_MAPPING).unwrap();
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
    // Every variable Envoy Gateway's Deployment sets with a Redis backend and Prometheus
    // on (internal/infrastructure/kubernetes/ratelimit/resource.go).
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
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        (
            "REDIS_URL",
            format!("redis.redis-system.svc.cluster.local:{}", redis.port()),
        ),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", ":19001".into()),
        ("PROMETHEUS_MAPPER_YAML", path(&mapping)),
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
    assert_eq!(health(&ns), "200 OK");

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
    let keys: u64 = redis.cli(&["dbsize"]).trim().parse().unwrap();
    assert!(keys > 0, "decided on Redis");

    // Route 2, 10 an hour (near the limit from 8): 8 requests admitted (0 -> 8), a 9th
    // (8 -> 9, near) whose response used 600 tokens, charged when its stream is done
    // (9 -> 609: 1 below the limit, near; 599 over it), then one refused.
    let metrics = || curl_at(ns.addr, 19001, "/metrics", None);
    let route2 = r#"{domain="default/eg/http",key1="httproute/default/api/rule/2_httproute/default/api/rule/2",key2="rule-2-match-0_rule-2-match-0"}"#;
    let stat = |name: &str| {
        series(
            &metrics(),
            &format!("ratelimit_service_rate_limit_{name}{route2}"),
        )
    };
    for _ in 0..8 {
        assert_eq!(get(port, "/c", &user).0, 200);
    }
    assert_eq!(
        get(port, "/c", &[("x-user", "one"), ("x-charge", "600")]).0,
        200
    );
    // Envoy sends the stream-done call after the response: wait for its hits.
    for attempt in 0.. {
        if stat("total_hits") == Some(609) {
            break;
        }
        assert!(
            attempt < 200,
            "the charge of 600 never arrived: {:?}",
            stat("total_hits")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(port, "/c", &user).0, 429, "over the limit");
    let exposition = metrics();
    for (name, want) in [
        ("total_hits", 610),
        ("within_limit", 9),
        ("near_limit", 2),
        ("over_limit", 600),
    ] {
        let got = series(
            &exposition,
            &format!("ratelimit_service_rate_limit_{name}{route2}"),
        );
        assert_eq!(got, Some(want), "{name}: {exposition}");
    }
    // Route 0's: 3 admitted (the 3rd past 2 of 3, near), 1 refused.
    let route0 = r#"{domain="default/eg/http",key1="httproute/default/api/rule/0_httproute/default/api/rule/0",key2="rule-0-match-0_rule-0-match-0"}"#;
    for (name, want) in [
        ("total_hits", 4),
        ("within_limit", 3),
        ("near_limit", 1),
        ("over_limit", 1),
    ] {
        let got = series(
            &exposition,
            &format!("ratelimit_service_rate_limit_{name}{route0}"),
        );
        assert_eq!(got, Some(want), "{name}: {exposition}");
    }
    // Route 1's path has three levels: Envoy Gateway's mapping drops its stats.
    assert!(
        !exposition
            .lines()
            .any(|l| l.starts_with("ratelimit_") && l.contains("rule/1")),
        "{exposition}"
    );
    assert!(exposition.contains("spillway_decisions_total{domain=\"default/eg/http\""));

    // Redis gone for a minute: the probe Envoy Gateway runs every 5 s (one failure takes
    // the pod out) and its liveness probe (3 × 10 s) see 200 every second of it; Envoy's
    // requests are refused by its failure_mode_deny (the rules' policy is closed).
    redis.kill();
    for second in 0..60 {
        assert_eq!(health(&ns), "200 OK", "second {second} of the outage");
        if second == 2 || second == 58 {
            assert_eq!(get(port, "/c", &user).0, 500, "failure_mode_deny");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    redis.restart();
    // Decided on Redis again (a fresh Redis: route 2's window starts over).
    for attempt in 0.. {
        if get(port, "/c", &user).0 == 200 {
            break;
        }
        assert!(attempt < 100, "decisions never came back to Redis");
        std::thread::sleep(Duration::from_millis(100));
    }
    let keys: u64 = redis.cli(&["dbsize"]).trim().parse().unwrap();
    assert!(keys > 0, "decided on Redis again");
    assert_eq!(health(&ns), "200 OK");

    // The same deployment with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true: 500 while no
    // connection to Redis is up, 200 once it is back.
    procs.0[0].kill().unwrap();
    procs.0[0].wait().unwrap();
    let mut env = env;
    env.push(("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true".into()));
    let (_second, startup) = ns.start_ratelimit(&dir, &env);
    assert!(
        !startup.iter().any(|l| l.contains("not honoured")),
        "{startup:#?}"
    );
    assert_eq!(health(&ns), "200 OK");
    redis.kill();
    for attempt in 0.. {
        if health(&ns).starts_with("500") {
            break;
        }
        assert!(attempt < 100, "still healthy with Redis gone");
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(health(&ns), "500 store unreachable", "while Redis is down");
    }
    redis.restart();
    for attempt in 0.. {
        if health(&ns) == "200 OK" {
            break;
        }
        assert!(attempt < 100, "not healthy again once Redis was back");
        std::thread::sleep(Duration::from_millis(100));
    }
}
