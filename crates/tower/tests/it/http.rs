//! What the layer answers, in an axum app over a real loopback socket on the memory
//! store with a manual clock: several limits at once, costs, header styles, shadow ban,
//! shadow mode, clones sharing one set of limits, and configurations refused at build.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use spillway_core::{Algorithm, MemoryStore};
use spillway_tower::{
    ClientIp, HeaderStyle, KeyExtractor, MissingKey, Mode, RateLimitLayer, RateLimitLayerBuilder,
    Rule,
};
use support::{app, builder, clock, header, limit, per_ip, per_minute, serve, serve_layer};
use tower::{Layer, Service, ServiceExt};

#[tokio::test]
async fn several_limits_are_all_or_nothing() {
    let clock = clock();
    let burst = limit(Algorithm::Gcra, 2, Duration::from_secs(1));
    let daily = limit(Algorithm::FixedWindow, 3, Duration::from_secs(86_400));
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .clock(clock.clone())
        .limit(Rule::new(
            "burst",
            burst,
            KeyExtractor::client_ip(ClientIp::new()),
        ))
        .limit(Rule::new("daily", daily, KeyExtractor::header("x-api-key")))
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let client = serve_layer(layer).await;
    let key = [("x-api-key", "k1")];

    let first = client.get("/", &key).await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        r#""burst";q=2;w=1, "daily";q=3;w=86400"#
    );
    assert_eq!(header(&first, "ratelimit"), r#""burst";r=1;t=1"#);
    assert_eq!(client.status("/", &key).await, 200);
    // The burst is spent: denied, and the daily quota is not charged for it.
    let denied = client.get("/", &key).await;
    assert_eq!(denied.status(), 429);
    assert_eq!(header(&denied, "ratelimit"), r#""burst";r=0;t=1"#);
    for _ in 0..5 {
        assert_eq!(client.status("/", &key).await, 429);
    }
    clock.advance(Duration::from_secs(1));
    let after = client.get("/", &key).await;
    assert_eq!(after.status(), 200);
    // Had the denials been charged, the daily quota would be gone; 3 of 3 are used.
    // (T0 is 80,000 s into its UTC day: the day ends 6,400 s later.)
    assert_eq!(header(&after, "ratelimit"), r#""daily";r=0;t=6399"#);
    let denied = client.get("/", &key).await;
    assert_eq!(header(&denied, "ratelimit"), r#""daily";r=0;t=6399"#);
}

#[tokio::test]
async fn costs_come_from_closures() {
    let body_bytes = |parts: &http::request::Parts| {
        parts
            .headers
            .get("content-length")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0)
    };
    let layer = builder()
        .limit(
            Rule::new(
                "bytes",
                per_minute(100),
                KeyExtractor::client_ip(ClientIp::new()),
            )
            .cost(body_bytes),
        )
        .limit(Rule::new(
            "calls",
            per_minute(1000),
            KeyExtractor::client_ip(ClientIp::new()),
        ))
        .cost(|parts| if parts.uri.path() == "/upload" { 10 } else { 1 })
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let client = serve_layer(layer).await;
    let upload = |n: usize| {
        client
            .http
            .post(format!("{}/upload", client.base))
            .body(vec![b'x'; n])
            .send()
    };
    let r = upload(60).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "ratelimit"), r#""bytes";r=40;t=40"#);
    assert_eq!(
        upload(60).await.unwrap().status(),
        429,
        "60 more bytes do not fit"
    );
    let r = upload(40).await.unwrap();
    assert_eq!(r.status(), 200, "40 do");
    // The layer's cost closure charged `calls` 10 per upload (two admitted).
    let get = client.get("/", &[("content-length", "0")]).await;
    assert_eq!(header(&get, "ratelimit"), r#""bytes";r=0;t=40"#);
    // Larger than the limit can ever admit: a 429 without Retry-After.
    let huge = upload(1000).await.unwrap();
    assert_eq!(huge.status(), 429);
    assert!(huge.headers().get("retry-after").is_none());
    let body: serde_json::Value = huge.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("retrying will not help")
    );
    assert!(body.get("retry_after_ms").is_none());
}

#[tokio::test]
async fn legacy_header_styles_and_none() {
    for (style, limit_header) in [
        (HeaderStyle::Legacy, Some("ratelimit-limit")),
        (HeaderStyle::XRateLimit, Some("x-ratelimit-limit")),
        (HeaderStyle::None, None),
    ] {
        let layer = builder()
            .limit(per_ip(per_minute(1)))
            .headers(style)
            .build()
            .unwrap();
        let client = serve_layer(layer).await;
        let allowed = client.get("/", &[]).await;
        assert!(
            allowed.headers().get("ratelimit-limit").is_none(),
            "off on allowed by default"
        );
        let denied = client.get("/", &[]).await;
        assert_eq!(denied.status(), 429);
        assert!(denied.headers().get("ratelimit").is_none());
        // T0 is 20 s into its minute.
        assert_eq!(header(&denied, "retry-after"), "40");
        match limit_header {
            Some(name) => {
                assert_eq!(header(&denied, name), "1");
                let prefix = name.trim_end_matches("limit");
                assert_eq!(header(&denied, &format!("{prefix}remaining")), "0");
                assert_eq!(header(&denied, &format!("{prefix}reset")), "40");
            }
            None => assert_eq!(denied.headers().len(), 4, "{:?}", denied.headers()),
        }
    }
}

#[tokio::test]
async fn a_shadow_ban_answers_for_the_service_without_calling_it() {
    let layer = builder()
        .limit(per_ip(per_minute(2)))
        .shadow_ban(|parts| {
            assert_eq!(parts.uri.path(), "/");
            http::Response::new("hello")
        })
        .build()
        .unwrap();
    let (router, calls) = app(layer);
    let client = serve(router).await;
    for _ in 0..5 {
        let r = client.get("/", &[]).await;
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("retry-after").is_none());
        assert_eq!(r.text().await.unwrap(), "hello");
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "only the two admitted calls ran"
    );
}

#[tokio::test]
async fn shadow_mode_calls_through_and_reports_what_it_would_have_done() {
    let layer = builder()
        .limit(per_ip(per_minute(2)))
        .mode(Mode::Shadow)
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let (router, calls) = app(layer);
    let client = serve(router).await;
    let mut last = None;
    for _ in 0..5 {
        let r = client.get("/", &[]).await;
        assert_eq!(r.status(), 200);
        last = Some(r);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    // Denied requests were not charged, so the limit still reads "spent", not "-3".
    assert_eq!(header(&last.unwrap(), "ratelimit"), r#""per-ip";r=0;t=40"#);
}

#[tokio::test]
async fn clones_of_the_layer_and_the_service_share_one_limit() {
    let layer = builder().limit(per_ip(per_minute(3))).build().unwrap();
    // Two routers (two listeners) from clones of one layer.
    let a = serve_layer(layer.clone()).await;
    let b = serve_layer(layer.clone()).await;
    let mut admitted = 0;
    for _ in 0..4 {
        admitted += a.admitted(1, "/", &[]).await + b.admitted(1, "/", &[]).await;
    }
    assert_eq!(admitted, 3);

    // Ten clones of one service, in process: still one limit.
    let fresh = builder()
        .limit(Rule::new(
            "all",
            per_minute(3),
            KeyExtractor::from_fn(|_| Some("k".into())),
        ))
        .build()
        .unwrap();
    let service = fresh.layer(tower::service_fn(|_: http::Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    }));
    let mut ok = 0;
    for _ in 0..10 {
        let mut clone = service.clone();
        let response = clone
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(String::new()))
            .await
            .unwrap();
        ok += usize::from(response.status() == 200);
    }
    assert_eq!(ok, 3);
}

/// Admitted responses keep the inner service's body type; a service whose body the
/// layer cannot write (here `Empty`) is wrapped in `ResponseBody`, and the 429 still
/// carries its JSON explanation.
#[tokio::test]
async fn any_body_type_through_response_body() {
    use http_body_util::{BodyExt, Empty};
    use spillway_tower::ResponseBody;

    let layer = builder()
        .limit(Rule::new(
            "all",
            per_minute(1),
            KeyExtractor::from_fn(|_| Some("k".into())),
        ))
        .build()
        .unwrap();
    let service = tower::ServiceBuilder::new()
        .layer(layer)
        .map_response(|r: http::Response<Empty<bytes::Bytes>>| r.map(ResponseBody::new))
        .service_fn(|_: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Empty::new()))
        });
    let first = service.clone().oneshot(http::Request::new(String::new()));
    let first = first.await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(
        first
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .is_empty()
    );
    let second = service
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    let body = second.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["limit"], "all", "{json}");
}

#[test]
fn bad_configurations_are_refused_when_built() {
    use spillway_tower::Error;
    let ip = || KeyExtractor::client_ip(ClientIp::new());
    let err =
        |b: RateLimitLayerBuilder<MemoryStore, spillway_core::ManualClock>| b.build().unwrap_err();
    assert_eq!(err(builder()), Error::NoLimits);
    assert_eq!(
        err(builder().limit(Rule::new("a b", per_minute(1), ip()))),
        Error::InvalidName("a b".into())
    );
    assert_eq!(
        err(builder()
            .limit(Rule::new("a", per_minute(1), ip()))
            .limit(Rule::new("a", per_minute(2), ip()))),
        Error::DuplicateName("a".into())
    );
    let bad_proxy = KeyExtractor::client_ip(ClientIp::new().trust("10.0.0.0/99"));
    assert!(matches!(
        err(builder().limit(Rule::new("a", per_minute(1), bad_proxy))),
        Error::InvalidKeySource { .. }
    ));
    assert!(matches!(
        err(builder().limit(Rule::new(
            "a",
            per_minute(1),
            KeyExtractor::header("bad header")
        ))),
        Error::InvalidKeySource { .. }
    ));
    assert!(matches!(
        err(builder()
            .limit(Rule::new("a", per_minute(1), ip()))
            .timeout(Duration::ZERO)),
        Error::ZeroTimeout(_)
    ));
    let too_long = "x".repeat(2000);
    assert!(matches!(
        err(builder()
            .limit(Rule::new("a", per_minute(1), ip()))
            .on_missing_key(MissingKey::Fallback(too_long))),
        Error::InvalidFallback(_)
    ));
}

/// Plain hyper: no framework records the peer, so the accept loop inserts it as a
/// `SocketAddr` extension in front of the layer.
#[tokio::test]
async fn a_plain_hyper_server_works_with_the_peer_in_an_extension() {
    use http_body_util::Full;
    use hyper_util::rt::TokioIo;

    let layer = builder().limit(per_ip(per_minute(1))).build().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let service = tower::ServiceBuilder::new()
                .map_request(move |mut r: http::Request<hyper::body::Incoming>| {
                    r.extensions_mut().insert(peer);
                    r
                })
                .layer(layer.clone())
                .service_fn(|_| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        bytes::Bytes::from("hi"),
                    )))
                });
            let hyper_service = hyper::service::service_fn(move |r| service.clone().oneshot(r));
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), hyper_service),
            );
        }
    });
    let client = support::Client {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
    };
    assert_eq!(client.status("/", &[]).await, 200);
    let denied = client.get("/", &[]).await;
    assert_eq!(denied.status(), 429);
    assert_eq!(header(&denied, "retry-after"), "40");
}

/// A key's own limit ([`Rule::overridden_by`]) decides that key's requests and is what
/// its headers report, beside a second rule kept as it is; a key without one keeps the
/// rule's; a limit the request could not be decided on as the rule's (one that holds)
/// is passed over; a rule that holds cannot be overridden.
#[tokio::test]
async fn a_keys_own_limit_replaces_the_rules_for_that_key_alone() {
    let gold = per_minute(3);
    let holds = limit(Algorithm::Concurrency, 9, Duration::from_secs(60));
    let own = move |key: &str| match key {
        "gold" => Some(gold.clone()),
        "odd" => Some(holds.clone()),
        _ => None,
    };
    let daily = limit(Algorithm::FixedWindow, 100, Duration::from_secs(86_400));
    let layer = builder()
        .limit(
            Rule::new("plan", per_minute(1), KeyExtractor::header("x-api-key")).overridden_by(own),
        )
        .limit(Rule::new("daily", daily, KeyExtractor::header("x-api-key")))
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let client = serve_layer(layer).await;
    let statuses = |key: &'static str| {
        let client = &client;
        async move {
            let mut out = Vec::new();
            for _ in 0..4 {
                out.push(client.status("/", &[("x-api-key", key)]).await);
            }
            out
        }
    };
    let first = client.get("/", &[("x-api-key", "gold")]).await;
    assert_eq!(
        header(&first, "ratelimit-policy"),
        r#""plan";q=3;w=60, "daily";q=100;w=86400"#
    );
    assert_eq!(statuses("gold").await, [200, 200, 429, 429]);
    assert_eq!(statuses("free").await, [200, 429, 429, 429]);
    assert_eq!(statuses("odd").await, [200, 429, 429, 429], "passed over");
    let other = client.get("/", &[("x-api-key", "new")]).await;
    assert_eq!(
        header(&other, "ratelimit-policy"),
        r#""plan";q=1;w=60, "daily";q=100;w=86400"#
    );

    let in_flight = limit(Algorithm::Concurrency, 2, Duration::from_secs(60));
    let refused = builder()
        .limit(
            Rule::new("at-once", in_flight, KeyExtractor::header("x-api-key"))
                .overridden_by(|_| None),
        )
        .build()
        .unwrap_err();
    assert!(
        matches!(&refused, spillway_tower::Error::InvalidSharing { limit, .. } if limit == "at-once"),
        "{refused}"
    );
}
