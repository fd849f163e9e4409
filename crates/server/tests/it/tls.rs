//! Serving TLS, over real sockets with certificates made here: gRPC and HTTP over TLS
//! with ALPN `h2` and `http/1.1`; mutual TLS (required on gRPC; on HTTP, health without
//! a certificate and 403 for the rest; another CA, an expired certificate and a SAN not
//! allowed are refused; the Rate Limit Quota Service asks the same); settings that
//! cannot be honoured stopping the start; and handshakes that fail or stall, closed and
//! counted. (Reloads: `tls_reload.rs`.)

use crate::support;

use std::time::Duration;

use spillway_server::{App, Config};
use spillway_testkit::metric;
use spillway_testkit::tls::{Leaf, Pair, Pki, client_config, connect, https};
use support::{Backing, Server};
use support::{TLS_POLICY as POLICY, eventually, grpc_over_tls, scrape, serving};
use tokio::io::AsyncWriteExt;

const CHECK: &str = r#"{"domain":"tls","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}"#;

#[tokio::test]
async fn grpc_and_http_speak_tls_with_h2_and_http1_and_refuse_plaintext() {
    let pki = Pki::new("serve-tls");
    let server_pair = pki.issue("server", Leaf::Good);
    let s = Server::start_with(
        "tls",
        &[("tls.yaml", POLICY)],
        Backing::Memory,
        serving(&server_pair),
    )
    .await;
    let (grpc, http) = (s.running.grpc_addr, s.running.http_addr);
    let ca = pki.ca();

    assert_eq!(
        grpc_over_tls(grpc, client_config(&ca, None, &[])).await,
        Ok("OK".into())
    );
    let (status, body) = https(
        http,
        client_config(&ca, None, &[]),
        "POST",
        "/v1/check",
        CHECK,
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");

    // ALPN: h2 when offered (gRPC clients such as grpc-go require it), else http/1.1.
    for (offered, chosen) in [
        (&[b"h2".as_slice(), b"http/1.1"][..], b"h2".as_slice()),
        (&[b"http/1.1".as_slice()][..], b"http/1.1".as_slice()),
    ] {
        let tls = connect(grpc, client_config(&ca, None, offered))
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(chosen));
    }

    // A plaintext client on a TLS port gets nothing but a closed connection, counted.
    let not_tls = |text: &str| {
        metric(
            text,
            "spillway_tls_handshake_failures_total{listener=\"http\",reason=\"not_tls\"}",
        )
    };
    // /metrics is on the HTTP port, which speaks TLS now.
    let before = not_tls(&scrape(http, &ca, None).await);
    let plain = reqwest::Client::new()
        .post(format!("http://{http}/v1/check"))
        .body(CHECK)
        .send()
        .await;
    assert!(plain.is_err(), "plaintext answered: {plain:?}");
    assert!(
        eventually(|| async { not_tls(&scrape(http, &ca, None).await) > before }).await,
        "counted"
    );
    // The admin listener stays plaintext unless asked (loopback only by default).
    let admin = s.running.admin_addr.unwrap();
    let r = reqwest::get(format!("http://{admin}/v1/config"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn mutual_tls_requires_a_certificate_from_the_ca_and_an_allowed_san() {
    let pki = Pki::new("serve-mtls");
    let other = Pki::new("serve-mtls-other");
    let server_pair = pki.issue("server", Leaf::Good);
    let ca = pki.ca();
    let (good, expired, foreign, envoy) = (
        pki.issue("client", Leaf::Good),
        pki.issue("client-expired", Leaf::Expired),
        other.issue("client-foreign", Leaf::Good),
        pki.issue("client-envoy", Leaf::Names(&["envoy.internal"])),
    );
    let client_ca = ca.clone();
    let s = Server::start_with("mtls", &[("tls.yaml", POLICY)], Backing::Memory, {
        let base = serving(&server_pair);
        move |settings| {
            base(settings);
            settings.tls.client_ca = Some(client_ca);
        }
    })
    .await;
    let (grpc, http) = (s.running.grpc_addr, s.running.http_addr);

    // gRPC: a certificate from the CA is required at the handshake.
    assert_eq!(
        grpc_over_tls(grpc, client_config(&ca, Some(&good), &[])).await,
        Ok("OK".into())
    );
    for (what, client) in [
        ("none", None),
        ("expired", Some(&expired)),
        ("another CA", Some(&foreign)),
    ] {
        let r = grpc_over_tls(grpc, client_config(&ca, client, &[])).await;
        assert!(r.is_err(), "{what}: {r:?}");
    }
    // The Rate Limit Quota Service, on the same listener, asks the same.
    assert_eq!(
        rlqs_over_tls(grpc, client_config(&ca, Some(&good), &[])).await,
        Ok(1)
    );
    let r = rlqs_over_tls(grpc, client_config(&ca, None, &[])).await;
    assert!(r.is_err(), "no certificate: {r:?}");

    // HTTP: health without a certificate; the rest needs one.
    let none = || client_config(&ca, None, &[]);
    for path in ["/healthz", "/readyz", "/healthcheck"] {
        let (status, _) = https(http, none(), "GET", path, "").await.unwrap();
        assert_eq!(status, 200, "{path}");
    }
    let (status, body) = https(http, none(), "POST", "/v1/check", CHECK)
        .await
        .unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("client_certificate_required"), "{body}");
    let (status, _) = https(
        http,
        client_config(&ca, Some(&good), &[]),
        "POST",
        "/v1/check",
        CHECK,
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    // A certificate presented is verified: a foreign or expired one ends the connection.
    for (what, client) in [("expired", &expired), ("another CA", &foreign)] {
        let r = https(
            http,
            client_config(&ca, Some(client), &[]),
            "GET",
            "/healthz",
            "",
        )
        .await;
        assert!(r.is_err(), "{what}: {r:?}");
    }
    let metrics = scrape(http, &ca, Some(&good)).await;
    assert!(
        metric(
            &metrics,
            "spillway_tls_handshake_failures_total{listener=\"grpc\",reason=\"no_client_certificate\"}"
        ) >= 1,
        "{metrics}"
    );
    assert!(
        metric(
            &metrics,
            "spillway_tls_handshake_failures_total{listener=\"http\",reason=\"bad_client_certificate\"}"
        ) >= 2,
        "{metrics}"
    );
    drop(s);

    // Allowed SANs: a certificate from the CA that names none of them is refused.
    let client_ca = ca.clone();
    let s = Server::start_with("mtls-san", &[("tls.yaml", POLICY)], Backing::Memory, {
        let base = serving(&server_pair);
        move |settings| {
            base(settings);
            settings.tls.client_ca = Some(client_ca);
            settings.tls.client_sans = vec!["envoy.internal".into()];
        }
    })
    .await;
    let grpc = s.running.grpc_addr;
    assert_eq!(
        grpc_over_tls(grpc, client_config(&ca, Some(&envoy), &[])).await,
        Ok("OK".into())
    );
    let r = grpc_over_tls(grpc, client_config(&ca, Some(&good), &[])).await;
    assert!(r.is_err(), "a SAN not allowed: {r:?}");
}

#[tokio::test]
async fn tls_settings_that_cannot_be_honoured_stop_the_start() {
    let pki = Pki::new("serve-bad");
    let (good, expired, other) = (
        pki.issue("good", Leaf::Good),
        pki.issue("expired", Leaf::Expired),
        pki.issue("other", Leaf::Good),
    );
    let dir = support::tempdir("tls-bad");
    std::fs::write(dir.join("tls.yaml"), POLICY).unwrap();
    let start = |tweak: &dyn Fn(&mut Config)| {
        let mut settings = Config::ephemeral(&dir);
        settings.admin.addr = None;
        tweak(&mut settings);
        async move {
            let started = match App::builder(settings).build().await {
                Ok(app) => app.start().await,
                Err(e) => Err(e),
            };
            match started {
                Ok(running) => {
                    running.stop().await;
                    "started".to_owned()
                }
                Err(e) => e.to_string(),
            }
        }
    };
    let pair = |p: &Pair| {
        let (c, k) = (p.cert.clone(), p.key.clone());
        move |s: &mut Config| {
            s.tls.cert = Some(c.clone());
            s.tls.key = Some(k.clone());
        }
    };
    assert_eq!(start(&pair(&good)).await, "started");
    let e = start(&pair(&expired)).await;
    assert!(e.contains("expired on"), "{e}");
    let e = start(&|s| {
        s.tls.cert = Some(good.cert.clone());
        s.tls.key = Some(other.key.clone());
    })
    .await;
    assert!(e.contains("cannot be used together"), "{e}");
    let e = start(&|s| {
        s.tls.cert = Some(dir.join("missing.crt"));
        s.tls.key = Some(good.key.clone());
    })
    .await;
    assert!(
        e.contains("cannot read certificate") && e.contains("missing.crt"),
        "{e}"
    );
    let e = start(&|s| {
        s.tls.listeners = Some(spillway_server::tls::TlsListeners {
            grpc: true,
            ..Default::default()
        })
    })
    .await;
    assert!(e.contains("refusing to serve plaintext"), "{e}");
    let e = start(&|s| {
        pair(&good)(s);
        s.tls.client_ca = Some(good.cert.clone()); // a leaf, not a CA: still a trust anchor
        s.tls.client_sans = vec![];
    })
    .await;
    assert_eq!(e, "started");
}

#[tokio::test]
async fn a_stalled_handshake_is_closed_and_counted_and_others_are_served() {
    let pki = Pki::new("serve-stall");
    let server_pair = pki.issue("server", Leaf::Good);
    let s = Server::start_with(
        "tls-stall",
        &[("tls.yaml", POLICY)],
        Backing::Memory,
        serving(&server_pair),
    )
    .await;
    let (grpc, ca) = (s.running.grpc_addr, pki.ca());
    let timeouts = |text: &str| {
        metric(
            text,
            "spillway_tls_handshake_failures_total{listener=\"grpc\",reason=\"timeout\"}",
        )
    };
    let http = s.running.http_addr;
    let before = timeouts(&scrape(http, &ca, None).await);
    // The start of a ClientHello record, then nothing.
    let mut stalled = tokio::net::TcpStream::connect(grpc).await.unwrap();
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
        .await
        .unwrap();
    // Others are served meanwhile.
    assert_eq!(
        grpc_over_tls(grpc, client_config(&ca, None, &[])).await,
        Ok("OK".into())
    );
    // Closed after the 300 ms handshake timeout.
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut stalled, &mut buf),
    )
    .await
    .expect("closed well within 5 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(eventually(|| async { timeouts(&scrape(http, &ca, None).await) > before }).await);
}

#[tokio::test]
async fn the_admin_listener_speaks_tls_when_asked_and_the_check_ports_need_not() {
    let pki = Pki::new("serve-admin-tls");
    let server_pair = pki.issue("server", Leaf::Good);
    let s = Server::start_with("tls-admin", &[("tls.yaml", POLICY)], Backing::Memory, {
        let base = serving(&server_pair);
        move |settings| {
            base(settings);
            settings.tls.listeners =
                Some(spillway_server::tls::TlsListeners::parse("admin").unwrap());
        }
    })
    .await;
    let admin = s.running.admin_addr.unwrap();
    let (status, body) = https(
        admin,
        client_config(&pki.ca(), None, &[]),
        "GET",
        "/rlconfig",
        "",
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert!(
        body.starts_with("tls.user: unit=MINUTE requests_per_unit=2"),
        "{body}"
    );
    let (status, _, _) = s.check(serde_json::from_str(CHECK).unwrap()).await;
    assert_eq!(status, 200, "the check port stays plaintext");
}

/// One RLQS stream over TLS on `addr`: a report of the bucket `{user: g1}` of domain
/// `tls`, and how many buckets its answer assigns.
async fn rlqs_over_tls(
    addr: std::net::SocketAddr,
    config: rustls::ClientConfig,
) -> Result<usize, String> {
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
        BucketId, RateLimitQuotaUsageReports,
    };

    let channel = spillway_server::tls::grpc_channel(&addr.to_string(), config)
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    let report = RateLimitQuotaUsageReports {
        domain: "tls".into(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("user".to_string(), "g1".to_string())].into(),
            }),
            num_requests_allowed: 1,
            ..Default::default()
        }],
    };
    let mut answers = RateLimitQuotaServiceClient::new(channel)
        .stream_rate_limit_quotas(futures_util::stream::iter([report]))
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
        .into_inner();
    let answer = answers
        .message()
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
        .ok_or("the stream ended with no answer")?;
    Ok(answer.bucket_action.len())
}

/// Over mutual TLS, an override's change is made by the client certificate's subject:
/// the audit names who presented the certificate, whatever the request says.
#[tokio::test]
async fn an_override_changed_over_mutual_tls_names_the_certificates_subject() {
    let pki = Pki::new("serve-admin-mtls");
    let server_pair = pki.issue("server", Leaf::Good);
    let billing = pki.issue("billing", Leaf::Good);
    let ca = pki.ca();
    let client_ca = ca.clone();
    let s = Server::start_with(
        "tls-admin-mtls",
        &[("tls.yaml", POLICY)],
        Backing::Memory,
        {
            let base = serving(&server_pair);
            move |settings| {
                base(settings);
                settings.tls.client_ca = Some(client_ca);
                settings.tls.listeners =
                    Some(spillway_server::tls::TlsListeners::parse("admin").unwrap());
            }
        },
    )
    .await;
    let admin = s.running.admin_addr.unwrap();
    let body = r#"{"entries": [{"key": "user", "value": "u1"}],
        "limits": [{"algorithm": "gcra", "limit": 5, "window": "1m"}], "by": "someone else"}"#;
    let (status, answer) = https(
        admin,
        client_config(&ca, Some(&billing), &[]),
        "PUT",
        "/v1/limits/tls",
        body,
    )
    .await
    .unwrap();
    assert_eq!(status, 400, "a body may not say who: {answer}");
    let body = r#"{"entries": [{"key": "user", "value": "u1"}],
        "limits": [{"algorithm": "gcra", "limit": 5, "window": "1m"}]}"#;
    let (status, answer) = https(
        admin,
        client_config(&ca, Some(&billing), &[]),
        "PUT",
        "/v1/limits/tls",
        body,
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{answer}");
    let change: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(change["by"], "cert:CN=billing", "{change}");
}
