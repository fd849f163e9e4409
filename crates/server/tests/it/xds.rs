//! Rules over xDS, from an ADS server run here as Envoy Gateway runs its own: TLS,
//! client certificates required, RSA PKCS#1 keys without extended key usage, node
//! `envoy-ratelimit`, one `RateLimitConfig` per domain, versions "1", "2", ... Version 1
//! is put in force and ACKed; version 2 changes a limit and the next decision follows;
//! version 3 is invalid: NACKed with the reason, and version 2 still decides (a resend
//! of it is NACKed again); the server restarts and the service reconnects and ACKs;
//! with the server down at startup, the service is ready (FORCE_START) and the rules
//! arrive when it comes up.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitUnit;
use spillway_server::Config;
use spillway_server::config::{Xds, XdsTls};
use spillway_server::listen::Limits;
use spillway_server::xds::TYPE_URL;
use spillway_testkit::ads::{Ads, Snapshot, gateway_config};
use spillway_testkit::tls::envoy_gateway_certs;
use support::{Backing, Server};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// An ADS server on `listener` over mutual TLS, until `stop` is cancelled.
async fn serve_ads(
    listener: tokio::net::TcpListener,
    ads: Ads,
    certs: &spillway_testkit::tls::GatewayCerts,
    stop: CancellationToken,
) {
    let files = spillway_server::tls::TlsFiles {
        cert: certs.server.cert.clone(),
        key: certs.server.key.clone(),
        client_ca: Some(certs.ca.clone()),
        client_sans: Vec::new(),
    };
    let router = ads.router().into_axum_router();
    spillway_server::listen::spawn_mutual_tls(listener, router, files, "ads", stop).unwrap();
}

/// The next request the server got, within 10 s.
async fn next(requests: &mut mpsc::UnboundedReceiver<DiscoveryRequest>) -> DiscoveryRequest {
    tokio::time::timeout(Duration::from_secs(10), requests.recv())
        .await
        .expect("a request within 10 s")
        .expect("the channel is open")
}

async fn allowed(s: &Server, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        let answer = s
            .should(
                "default/eg/http",
                &[
                    (
                        "httproute/default/api/rule/0",
                        "httproute/default/api/rule/0",
                    ),
                    ("rule-0-match-0", "x"),
                ],
            )
            .await;
        admitted += usize::from(answer.overall_code == 1);
    }
    admitted
}

fn xds_settings(addr: SocketAddr, certs: &spillway_testkit::tls::GatewayCerts) -> Xds {
    Xds {
        server: Some(addr.to_string()),
        node_id: "envoy-ratelimit".into(),
        tls: Some(XdsTls {
            server_ca: Some(certs.ca.clone()),
            server_san: Some("envoy-gateway".into()),
            client_cert: Some(certs.client.cert.clone()),
            client_key: Some(certs.client.key.clone()),
        }),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        ..Config::default().rules.xds
    }
}

#[tokio::test]
async fn rules_arrive_change_are_refused_and_survive_a_server_restart() {
    let dir = support::tempdir("xds-certs");
    let certs = envoy_gateway_certs(&dir);
    let (snapshot_tx, snapshot) = watch::channel::<Snapshot>(None);
    let (requests_tx, mut requests) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let ads = Ads::new(snapshot, requests_tx).stopped_by(stop.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_ads(listener, ads.clone(), &certs, stop.clone()).await;

    let xds = xds_settings(addr, &certs);
    let s = Server::start_with("xds", &[], Backing::Memory, move |settings: &mut Config| {
        settings.rules.xds = xds;
    })
    .await;
    // Not ready before the first rules (FORCE_START_WITHOUT_INITIAL_CONFIG unset).
    let first = next(&mut requests).await;
    assert_eq!(first.node.as_ref().unwrap().id, "envoy-ratelimit");
    assert_eq!(first.type_url, TYPE_URL);
    assert_eq!(first.version_info, "");
    let health = s.http.get(s.url("/healthcheck")).send().await.unwrap();
    assert_eq!(health.status(), 500, "waiting for the first rules");

    // Version 1: in force, then ACKed.
    snapshot_tx.send_replace(Some(("1".into(), vec![gateway_config(3)])));
    let ack = next(&mut requests).await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("1", "nonce-1")
    );
    assert!(ack.error_detail.is_none());
    assert_eq!(allowed(&s, 4).await, 3, "3 a minute");
    let health = s.http.get(s.url("/healthcheck")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    // Version 2 raises the limit: the next decisions follow it.
    snapshot_tx.send_replace(Some(("2".into(), vec![gateway_config(6)])));
    let ack = next(&mut requests).await;
    assert_eq!(ack.version_info, "2");
    // The reference's counters count every hit, admitted or not: 4 so far.
    assert_eq!(allowed(&s, 3).await, 2, "6 a minute now, 4 counted");

    // Version 3 is invalid: NACKed with the reason, version 2 stays.
    let mut bad = gateway_config(100);
    bad.descriptors[0].descriptors[0]
        .rate_limit
        .as_mut()
        .unwrap()
        .unit = RateLimitUnit::Unknown as i32;
    snapshot_tx.send_replace(Some(("3".into(), vec![bad])));
    let nack = next(&mut requests).await;
    assert_eq!(nack.version_info, "2", "the version in force");
    assert_eq!(nack.response_nonce, "nonce-3");
    let detail = nack.error_detail.expect("a NACK says why");
    assert_eq!(detail.code, tonic::Code::InvalidArgument as i32);
    assert!(
        detail.message.contains("xds:default/eg/http"),
        "{}",
        detail.message
    );
    let config: serde_json::Value = serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
    assert!(
        config["last_load_error"].as_str().unwrap().contains("unit"),
        "{config}"
    );
    assert_eq!(
        allowed(&s, 1).await,
        0,
        "version 2's limit, used up (8 counted)"
    );
    // The server sends the rejected version again (go-control-plane does): NACKed
    // again, not loaded, logged or counted again.
    let loads = |c: &serde_json::Value| c["loads"].as_u64().unwrap();
    let before = loads(&config);
    let resent = snapshot_tx.borrow().clone();
    snapshot_tx.send_replace(resent);
    let nack = next(&mut requests).await;
    assert_eq!(
        (nack.version_info.as_str(), nack.error_detail.is_some()),
        ("2", true)
    );
    let config: serde_json::Value = serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
    assert_eq!(loads(&config), before, "the resend is not another load");

    // The server restarts: the service reconnects, asking with the version in force.
    stop.cancel();
    assert_eq!(
        allowed(&s, 1).await,
        0,
        "disconnected, version 2 still decides"
    );
    let listener = loop {
        // The port is free once the old listener is dropped.
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    snapshot_tx.send_replace(Some(("4".into(), vec![gateway_config(20)])));
    let again = ads.stopped_by(CancellationToken::new());
    serve_ads(listener, again, &certs, CancellationToken::new()).await;
    let mut reconnect = next(&mut requests).await;
    while !reconnect.response_nonce.is_empty() {
        reconnect = next(&mut requests).await; // late NACKs of the old stream
    }
    assert_eq!(reconnect.version_info, "2");
    let ack = next(&mut requests).await;
    assert_eq!(ack.version_info, "4");
    assert_eq!(allowed(&s, 2).await, 2, "20 a minute now, 9 counted");
}

#[tokio::test]
async fn with_force_start_the_service_is_ready_before_the_server_is_up() {
    let dir = support::tempdir("xds-late-certs");
    let certs = envoy_gateway_certs(&dir);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener); // nothing listens yet
    let xds = xds_settings(addr, &certs);
    let s = Server::start_with(
        "xds-late",
        &[],
        Backing::Memory,
        move |settings: &mut Config| {
            settings.rules.xds = xds;
            settings.rules.xds.ready_without_rules = true;
        },
    )
    .await;
    let health = s.http.get(s.url("/healthcheck")).send().await.unwrap();
    assert_eq!(health.status(), 200, "FORCE_START_WITHOUT_INITIAL_CONFIG");
    assert_eq!(allowed(&s, 3).await, 3, "no rules yet: nothing is limited");

    let (snapshot_tx, snapshot) =
        watch::channel::<Snapshot>(Some(("1".into(), vec![gateway_config(1)])));
    let (requests_tx, mut requests) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    serve_ads(
        listener,
        Ads::new(snapshot, requests_tx),
        &certs,
        CancellationToken::new(),
    )
    .await;
    let _first = next(&mut requests).await;
    let ack = next(&mut requests).await;
    assert_eq!(ack.version_info, "1");
    assert_eq!(allowed(&s, 2).await, 1);
    drop(snapshot_tx);
}

/// Every descriptor shape Envoy Gateway generates, received over xDS (plaintext here):
/// `rule-<i>-method` and `rule-<i>-path` chains, a rule without a match
/// (`rule-<i>-match--1`), `shadow_mode` on every level, a per-descriptor `hits_addend`
/// and a limit override in the request.
#[tokio::test]
async fn envoy_gateways_descriptor_shapes_decide_as_generated() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    use envoy_types::pb::google::protobuf::UInt64Value;
    use envoy_types::pb::ratelimit::config::ratelimit::v3::{
        RateLimitConfig, RateLimitDescriptor as D, RateLimitPolicy,
    };
    let per_hour = |n| {
        Some(RateLimitPolicy {
            unit: RateLimitUnit::Hour as i32,
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        })
    };
    let level = |key: &str, value: &str, shadow: bool, limit, nested: Vec<D>| D {
        key: key.into(),
        value: value.into(),
        rate_limit: limit,
        descriptors: nested,
        shadow_mode: shadow,
        ..D::default()
    };
    let route = "httproute/default/api/rule/0";
    let config = RateLimitConfig {
        name: "default/eg/http".into(),
        domain: "default/eg/http".into(),
        descriptors: vec![level(
            route,
            route,
            false,
            None,
            vec![
                // method then path, the limit on the last level
                level(
                    "rule-0-method",
                    "GET",
                    false,
                    None,
                    vec![level("rule-0-path", "/api", false, per_hour(5), vec![])],
                ),
                // a rule with no match: one counter for the route
                level(
                    "rule-1-match--1",
                    "rule-1-match--1",
                    false,
                    per_hour(2),
                    vec![],
                ),
                // shadow mode on every level of a rule
                level(
                    "rule-2-match-0",
                    "rule-2-match-0",
                    true,
                    None,
                    vec![level("rule-2-path", "/shadow", true, per_hour(1), vec![])],
                ),
            ],
        )],
    };
    let (_snapshot_tx, snapshot) = watch::channel::<Snapshot>(Some(("1".into(), vec![config])));
    let (requests_tx, mut requests) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(spillway_server::listen::serve(
        listener,
        Ads::new(snapshot, requests_tx).router().into_axum_router(),
        CancellationToken::new(),
        Limits {
            drain: Duration::from_millis(100),
            ..Limits::new("ads")
        },
        None,
    ));
    let xds = Xds {
        server: Some(addr.to_string()),
        node_id: "envoy-ratelimit".into(),
        ..Config::default().rules.xds
    };
    let s = Server::start_with("xds-shapes", &[], Backing::Memory, move |settings| {
        settings.rules.xds = xds;
    })
    .await;
    let _first = next(&mut requests).await;
    assert_eq!(next(&mut requests).await.version_info, "1");

    let chain = |tail: &[(&'static str, &'static str)]| {
        let mut entries = vec![(route, route)];
        entries.extend_from_slice(tail);
        support::descriptor(&entries)
    };
    let ask =
        |d: envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor| {
            let request = envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
                domain: "default/eg/http".into(),
                descriptors: vec![d],
                hits_addend: 0,
            };
            s.ask(request)
        };
    // Method and path: 5 an hour; a per-descriptor hits_addend of 3 twice is over.
    let mut heavy = chain(&[("rule-0-method", "GET"), ("rule-0-path", "/api")]);
    heavy.hits_addend = Some(UInt64Value { value: 3 });
    assert_eq!(ask(heavy.clone()).await.overall_code, 1, "3 of 5");
    assert_eq!(ask(heavy).await.overall_code, 2, "6 of 5");
    // No match: 2 an hour for the route.
    let any = chain(&[("rule-1-match--1", "rule-1-match--1")]);
    let codes: Vec<i32> = [
        ask(any.clone()).await,
        ask(any.clone()).await,
        ask(any.clone()).await,
    ]
    .iter()
    .map(|r| r.overall_code)
    .collect();
    assert_eq!(codes, [1, 1, 2]);
    // Shadow mode: over the limit, never denied; the status says so.
    let shadow = chain(&[
        ("rule-2-match-0", "rule-2-match-0"),
        ("rule-2-path", "/shadow"),
    ]);
    for _ in 0..3 {
        assert_eq!(
            ask(shadow.clone()).await.overall_code,
            1,
            "shadow never denies"
        );
    }
    // A limit override in the request replaces the rule's: 1 a minute.
    let mut overridden = chain(&[("rule-1-match--1", "rule-1-match--1")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 2, // MINUTE
    });
    assert_eq!(ask(overridden.clone()).await.overall_code, 1);
    assert_eq!(ask(overridden).await.overall_code, 2);
}
