//! `POST /v1/check` over a real socket: Spillway's format with each algorithm,
//! multi-limit all-or-nothing, shadow rules, headers, and bad input.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::{Backing, Server, backings};

const POLICY: &str = "
domain: app
descriptors:
  - key: user
    limits:
      - { name: burst, algorithm: gcra, limit: 2, window: 1s }
      - { name: daily, algorithm: fixed_window, limit: 3, unit: day }
  - key: log
    limits: [{ name: log, algorithm: sliding_log, limit: 2, window: 10s }]
  - key: sw
    limits: [{ name: sw, algorithm: sliding_window, precision: 10, edge: strict, limit: 2, window: 10s }]
  - key: tb
    limits: [{ name: tb, algorithm: token_bucket, limit: 2, window: 10s }]
  - key: fw
    limits: [{ name: fw, algorithm: fixed_window, limit: 2, window: 10s }]
  - key: trial
    mode: shadow
    limits: [{ name: trial, algorithm: gcra, limit: 1, window: 1m }]
";

fn one(key: &str, value: &str) -> serde_json::Value {
    json!({ "domain": "app", "descriptors": [{ "entries": [{ "key": key, "value": value }] }] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_admits_its_limit_then_429s_with_headers() {
    for backing in backings() {
        let s = Server::start("every-algorithm", &[("app.yaml", POLICY)], backing.clone()).await;
        for alg in ["log", "sw", "tb", "fw"] {
            for n in 0..2 {
                let (status, _, body) = s.check(one(alg, "v")).await;
                assert_eq!(status, 200, "{backing:?} {alg} #{n}: {body}");
            }
            let (status, headers, body) = s.check(one(alg, "v")).await;
            assert_eq!(status, 429, "{backing:?} {alg}: {body}");
            assert_eq!(body["denied_by"], json!({ "descriptor": 0, "rule": alg }));
            assert_eq!(
                body["descriptors"][0]["rule"]["algorithm"],
                json!(if alg == "log" {
                    "sliding_log"
                } else if alg == "sw" {
                    "sliding_window"
                } else if alg == "tb" {
                    "token_bucket"
                } else {
                    "fixed_window"
                })
            );
            assert_eq!(headers["ratelimit-policy"], format!("\"{alg}\";q=2;w=10"));
            assert!(
                headers["ratelimit"]
                    .to_str()
                    .unwrap()
                    .starts_with(&format!("\"{alg}\";r=0;t="))
            );
            let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
            // strict sliding_window counts the oldest sub-bucket whole: up to W + W/precision.
            assert!((1..=11).contains(&retry), "{alg}: retry-after {retry}");
        }
        s.running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_are_charged_all_or_nothing() {
    for backing in backings() {
        let s = Server::start("all-or-nothing", &[("app.yaml", POLICY)], backing.clone()).await;
        // burst 2 per second, daily 3.
        assert_eq!(s.check(one("user", "u")).await.0, 200);
        assert_eq!(s.check(one("user", "u")).await.0, 200);
        let (status, _, body) = s.check(one("user", "u")).await;
        assert_eq!(status, 429);
        assert_eq!(body["denied_by"]["rule"], "burst");
        s.advance(Duration::from_secs(1));
        // The denied request did not spend the daily quota: one is left.
        let (status, _, body) = s.check(one("user", "u")).await;
        assert_eq!(status, 200, "{backing:?}: {body}");
        s.advance(Duration::from_secs(1));
        let (status, _, body) = s.check(one("user", "u")).await;
        assert_eq!(
            (status, &body["denied_by"]["rule"]),
            (429, &json!("daily")),
            "{backing:?}: {body}"
        );

        // A peek (cost 0) reports without charging.
        let mut peek = one("fw", "p");
        peek["cost"] = json!(0);
        for _ in 0..5 {
            let (status, _, body) = s.check(peek.clone()).await;
            assert_eq!(
                (status, &body["descriptors"][0]["remaining"]),
                (200, &json!(2))
            );
        }
        s.running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_rule_reports_but_never_denies_nor_blocks_charging() {
    let s = Server::start("shadow", &[("app.yaml", POLICY)], Backing::Memory).await;
    let both = json!({ "domain": "app", "descriptors": [
        { "entries": [{ "key": "trial", "value": "t" }] },
        { "entries": [{ "key": "fw", "value": "t" }] },
    ]});
    assert_eq!(s.check(both.clone()).await.0, 200);
    let (status, _, body) = s.check(both.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["descriptors"][0]["shadow_denied"], true);
    assert_eq!(body["descriptors"][0]["rule"]["mode"], "shadow");
    // The enforcing rule was charged both times despite the shadow denial.
    assert_eq!(s.check(both).await.0, 429);
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_headers_are_a_setting() {
    let s = Server::start_with("legacy", &[("app.yaml", POLICY)], Backing::Memory, |st| {
        st.headers.style = spillway_server::HeaderStyle::XRateLimit;
    })
    .await;
    let (_, headers, _) = s.check(one("fw", "x")).await;
    assert_eq!(headers["x-ratelimit-limit"], "2");
    assert_eq!(headers["x-ratelimit-remaining"], "1");
    assert!(headers.get("ratelimit-policy").is_none());
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_with_a_json_error_and_no_store_call() {
    let s = Server::start("bad-input", &[("app.yaml", POLICY)], Backing::Memory).await;
    let many: Vec<_> = (0..10_000)
        .map(|i| json!({ "entries": [{ "key": "fw", "value": i.to_string() }] }))
        .collect();
    let long = "x".repeat(1 << 20);
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (json!({ "domain": "", "descriptors": [{ "entries": [{ "key": "fw" }] }] }).to_string().into(), 400, "domain must not be empty"),
        (json!({ "domain": "d".repeat(300), "descriptors": [{ "entries": [{ "key": "fw" }] }] }).to_string().into(), 400, "domain is 300 bytes"),
        (json!({ "domain": "app", "descriptors": [] }).to_string().into(), 400, "descriptor list must not be empty"),
        (json!({ "domain": "app", "descriptors": many }).to_string().into(), 413, ""),
        (json!({ "domain": "app", "descriptors": [{ "entries": [{ "key": "fw", "value": long }] }] }).to_string().into(), 413, ""),
        (json!({ "domain": "app", "descriptors": [{ "entries": [{ "key": "x".repeat(2000), "value": "v" }] }] }).to_string().into(), 400, "the most is 256"),
        (b"{\"domain\":\"app\xff\",\"descriptors\":[]}".to_vec(), 400, "invalid request body"),
        (br#"{"domain":"app","descriptors":[{"entries":[{"key":"fw"}]}],"cost":NaN}"#.to_vec(), 400, "invalid request body"),
        (br#"{"domain":"app","descriptors":[{"entries":[{"key":"fw"}]}],"cost":-1}"#.to_vec(), 400, "invalid request body"),
        (br#"{"domain":"app","descriptors":[{"entries":[{"key":"fw"}]}],"cost":1e300}"#.to_vec(), 400, "invalid request body"),
        (br#"{"domain":"app","descriptors":[{"entries":[{"key":"fw"}]}],"cost":9007199254740993}"#.to_vec(), 400, "larger than 2^53"),
        (br#"{"domain":"app","descriptors":[{"entries":[{"key":""}]}]}"#.to_vec(), 400, "empty key"),
        (br#"{"domain":"app","descriptors":[{"entries":[{"key":"fw"}],"limit":{"requests_per_unit":1,"unit":"fortnight"}}]}"#.to_vec(), 400, "invalid rate limit unit"),
        (br#"{"domain":"app","descriptors":[{"entries":[{"key":"fw"}]}],"surprise":1}"#.to_vec(), 400, "unknown field"),
        (b"not json".to_vec(), 400, "invalid request body"),
    ];
    for (body, expected_status, expected) in cases {
        let r = s
            .http
            .post(s.url("/v1/check"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        assert_eq!(status, expected_status, "{text}");
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
        assert!(
            v["error"]["message"].as_str().unwrap().contains(expected),
            "`{expected}` in {text}"
        );
    }
    let spillway_server::AnyStore::Memory(m) = &s.running.state.service.stores().store() else {
        unreachable!()
    };
    assert_eq!(m.len(), 0, "no bad request reached the store");

    // The reference's /json: 400 for a body that is not a request.
    let r = s
        .http
        .post(s.url("/json"))
        .body("{\"domain\":5}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = s
        .http
        .post(s.url("/json"))
        .body(r#"{"domain":"app","descriptors":[{"entries":[{"key":"fw","value":"j"}]}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["limitRemaining"], 1);
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_bad_input_is_invalid_argument() {
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    let s = Server::start("grpc-bad", &[("app.yaml", POLICY)], Backing::Memory).await;
    let mut c = s.grpc().await;
    let huge = support::request("app", &[&[(&"x".repeat(2000), "v")]]);
    let many_entries: Vec<(&str, &str)> = (0..10_000).map(|_| ("fw", "v")).collect();
    let many: Vec<&[(&str, &str)]> = (0..10_000).map(|_| &many_entries[..1]).collect();
    for (req, expected) in [
        (huge, tonic::Code::InvalidArgument),
        (support::request("app", &many), tonic::Code::InvalidArgument),
        (
            RateLimitRequest {
                domain: "a".repeat(300),
                ..support::request("app", &[&[("fw", "v")]])
            },
            tonic::Code::InvalidArgument,
        ),
    ] {
        let e = c.should_rate_limit(req).await.unwrap_err();
        assert_eq!(e.code(), expected, "{e:?}");
    }

    // Bytes that are not a RateLimitRequest, sent as one.
    let body = {
        let garbage = [0xff_u8, 0xff, 0xff, 0xff, 0x0f, 0x12];
        let mut frame = vec![0u8];
        frame.extend_from_slice(&(garbage.len() as u32).to_be_bytes());
        frame.extend_from_slice(&garbage);
        frame
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes_of::Bytes>>();
    let req = hyper::Request::post(format!(
        "http://{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        s.running.grpc_addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(http_body_util::Full::new(bytes_of::Bytes::from(body)))
    .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(
        resp.headers()["grpc-status"],
        "3",
        "INVALID_ARGUMENT: {:?}",
        resp.headers()
    );
    s.running.stop().await;
}

mod bytes_of {
    pub use axum::body::Bytes;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_follows_readiness() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let s = Server::start("health", &[("app.yaml", POLICY)], Backing::Memory).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", s.running.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in [
        "",
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        // The first readiness check runs as the server starts; wait for its answer.
        let mut changes = health
            .watch(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        loop {
            let status = changes.message().await.unwrap().expect("a status").status;
            if status == ServingStatus::Serving as i32 {
                break;
            }
        }
    }
    for path in ["/readyz", "/healthz", "/healthcheck"] {
        let status = s.http.get(s.url(path)).send().await.unwrap().status();
        assert_eq!(status.as_u16(), 200, "{path}");
    }
    s.running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_disconnected_after_the_read_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Server::start_with(
        "slow-client",
        &[("app.yaml", POLICY)],
        Backing::Memory,
        |st| {
            st.listen.header_read_timeout = Duration::from_millis(200);
        },
    )
    .await;
    let half_body = "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"domain\":";
    for (sent, answer) in [
        ("", None),
        ("POST /v1/check HTTP/1.1\r\nHost: x\r\n", None),
        (half_body, Some("HTTP/1.1 408")),
    ] {
        let mut conn = tokio::net::TcpStream::connect(s.running.http_addr)
            .await
            .unwrap();
        conn.write_all(sent.as_bytes()).await.unwrap();
        // The server closes the connection; waiting for that is waiting for an event,
        // bounded so a regression fails instead of hanging.
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "still open after 5 s, having sent {sent:?}");
        let text = String::from_utf8_lossy(&buf);
        if let Some(status) = answer {
            assert!(text.starts_with(status), "{text}");
            assert!(text.contains("did not arrive within 200ms"), "{text}");
        }
    }
    s.running.stop().await;
}

/// A web page of another site cannot post to the check APIs from its visitors'
/// browsers (a `text/plain` POST needs no CORS preflight): its `Origin` is refused
/// before anything is counted. Programs (no `Origin`) and the port's own origin are
/// answered. Issue #37.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_browser_post_is_refused_and_counts_nothing() {
    let s = Server::start("cross-site", &[("app.yaml", POLICY)], Backing::Memory).await;
    let body = one("fw", "browser").to_string();
    let post = |path: &str, origin: Option<&str>| {
        let mut r = s
            .http
            .post(s.check_url(path))
            .header("content-type", "text/plain")
            .body(body.clone());
        if let Some(origin) = origin {
            r = r.header("origin", origin);
        }
        r.send()
    };
    for origin in [
        "https://evil.example",
        "null",
        "http://localhost.evil.example:8080",
    ] {
        for path in ["/v1/check", "/json"] {
            let r = post(path, Some(origin)).await.unwrap();
            assert_eq!(r.status(), 403, "{path} from {origin}");
            let answer: serde_json::Value = r.json().await.unwrap();
            assert_eq!(answer["error"]["kind"], "cross_site", "{answer}");
        }
    }
    // Nothing was counted: the limit of 2 is whole.
    let own = format!("http://{}", s.running.http_addr);
    assert_eq!(post("/v1/check", Some(&own)).await.unwrap().status(), 200);
    assert_eq!(post("/v1/check", None).await.unwrap().status(), 200);
    assert_eq!(post("/v1/check", None).await.unwrap().status(), 429);
}
