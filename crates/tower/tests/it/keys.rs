//! Where keys come from, in an axum app over a real loopback socket on the memory store
//! with a manual clock: the peer address, forwarding headers behind trusted proxies,
//! IPv6 grouping, headers, extensions, routes, closures, and requests without a key.

use crate::support;

use std::time::Duration;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::routing::get;
use axum::{Router, response::Response};
use spillway_core::{Algorithm, MemoryStore};
use spillway_tower::{ClientIp, KeyExtractor, MissingKey, RateLimitLayer, Rule};
use support::{builder, clock, header, limit, per_ip, per_minute, serve, serve_layer};

#[tokio::test]
async fn the_peer_address_is_the_key_and_a_denial_is_a_429_with_headers() {
    let clock = clock();
    let gcra = limit(Algorithm::Gcra, 2, Duration::from_secs(1));
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .clock(clock.clone())
        .limit(per_ip(gcra))
        .build()
        .unwrap();
    let client = serve_layer(layer).await;

    assert_eq!(client.admitted(2, "/", &[]).await, 2);
    let denied = client.get("/", &[]).await;
    assert_eq!(denied.status(), 429);
    assert_eq!(header(&denied, "retry-after"), "1");
    assert_eq!(header(&denied, "ratelimit-policy"), r#""per-ip";q=2;w=1"#);
    assert_eq!(header(&denied, "ratelimit"), r#""per-ip";r=0;t=1"#);
    assert_eq!(header(&denied, "content-type"), "application/json");
    let body: serde_json::Value = denied.json().await.unwrap();
    assert_eq!(body["limit"], "per-ip");
    assert_eq!(body["retry_after_ms"], 500);
    assert!(body["error"].as_str().unwrap().contains("rate limited"));

    clock.advance(Duration::from_millis(500));
    assert_eq!(client.status("/", &[]).await, 200);
}

#[tokio::test]
async fn forwarding_headers_count_only_behind_trusted_proxies_and_ipv6_groups_by_prefix() {
    let trusting = builder()
        .limit(Rule::new(
            "per-ip",
            per_minute(1),
            KeyExtractor::client_ip(ClientIp::new().trust("127.0.0.1")),
        ))
        .build()
        .unwrap();
    let client = serve_layer(trusting).await;
    let from = |ip: &'static str| [("x-forwarded-for", ip)];
    assert_eq!(client.status("/", &from("203.0.113.1")).await, 200);
    assert_eq!(client.status("/", &from("203.0.113.1")).await, 429);
    assert_eq!(
        client.status("/", &from("203.0.113.2")).await,
        200,
        "another client"
    );
    // A client's own entry is left of the one the proxy appended: it cannot pick a key.
    assert_eq!(client.status("/", &from("9.9.9.9, 203.0.113.1")).await, 429);
    // Nor can it with a header the proxy does not append (nginx appends only XFF).
    let spoof = [
        ("forwarded", "for=6.6.6.6"),
        ("x-forwarded-for", "203.0.113.1"),
    ];
    assert_eq!(client.status("/", &spoof).await, 429);
    // One /64, two addresses: one client. Another /64: another client.
    assert_eq!(client.status("/", &from("2001:db8:0:1::a")).await, 200);
    assert_eq!(client.status("/", &from("2001:db8:0:1::b")).await, 429);
    assert_eq!(client.status("/", &from("2001:db8:0:2::a")).await, 200);
    // An unreadable hop from a trusted proxy: no key, so 400.
    assert_eq!(client.status("/", &from("unknown")).await, 400);

    let untrusting = builder().limit(per_ip(per_minute(1))).build().unwrap();
    let client = serve_layer(untrusting).await;
    assert_eq!(client.status("/", &from("203.0.113.1")).await, 200);
    assert_eq!(
        client.status("/", &from("203.0.113.2")).await,
        429,
        "the header is ignored: both came from 127.0.0.1"
    );
}

#[tokio::test]
async fn a_missing_key_is_a_400_naming_it_or_counts_under_the_fallback() {
    let per_key = || Rule::new("per-key", per_minute(1), KeyExtractor::header("x-api-key"));
    let client = serve_layer(builder().limit(per_key()).build().unwrap()).await;
    let missing = client.get("/", &[]).await;
    assert_eq!(missing.status(), 400);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(
        body["error"],
        "missing rate limit key for `per-key`: no `x-api-key` header"
    );
    assert_eq!(client.status("/", &[("x-api-key", "k1")]).await, 200);
    assert_eq!(client.status("/", &[("x-api-key", "k1")]).await, 429);
    assert_eq!(client.status("/", &[("x-api-key", "k2")]).await, 200);

    let fallback = builder()
        .limit(per_key())
        .on_missing_key(MissingKey::Fallback("anonymous".into()))
        .build()
        .unwrap();
    let client = serve_layer(fallback).await;
    assert_eq!(client.status("/", &[]).await, 200);
    assert_eq!(
        client.status("/", &[]).await,
        429,
        "keyless requests share one limit"
    );
    assert_eq!(client.status("/", &[("x-api-key", "k1")]).await, 200);
}

#[derive(Clone, Debug)]
struct User(String);

impl std::fmt::Display for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Stands in for an auth layer: the bearer token is the user.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let user = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|u| User(u.to_owned()));
    if let Some(user) = user {
        request.extensions_mut().insert(user);
    }
    next.run(request).await
}

#[tokio::test]
async fn an_authenticated_user_from_the_extensions_is_the_key() {
    let layer = builder()
        .limit(Rule::new(
            "per-user",
            per_minute(2),
            KeyExtractor::extension::<User>(),
        ))
        .build()
        .unwrap();
    // Layers run outside-in: authentication first, then the limit.
    let router = Router::new()
        .route("/", get(|| async { "hi" }))
        .layer(layer)
        .layer(middleware::from_fn(authenticate));
    let client = serve(router).await;
    let alice = [("authorization", "Bearer alice")];
    assert_eq!(client.admitted(3, "/", &alice).await, 2);
    assert_eq!(
        client.status("/", &[("authorization", "Bearer bob")]).await,
        200
    );
    let anonymous = client.get("/", &[]).await;
    assert_eq!(anonymous.status(), 400);
    let body: serde_json::Value = anonymous.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("User` request extension")
    );
}

#[tokio::test]
async fn method_and_route_keys_on_the_matched_route_not_the_path() {
    let layer = builder()
        .limit(Rule::new(
            "per-route",
            per_minute(2),
            KeyExtractor::method_and_route(),
        ))
        .build()
        .unwrap();
    let router = Router::new()
        .route(
            "/items/{id}",
            get(|| async { "item" }).post(|| async { "made" }),
        )
        .route_layer(layer);
    let client = serve(router).await;
    assert_eq!(client.status("/items/1", &[]).await, 200);
    assert_eq!(client.status("/items/2", &[]).await, 200);
    assert_eq!(
        client.status("/items/3", &[]).await,
        429,
        "one route, three paths"
    );
    let post = client
        .http
        .post(format!("{}/items/1", client.base))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 200, "another method is another key");
}

#[tokio::test]
async fn a_closure_can_make_any_key() {
    let by_query = KeyExtractor::from_fn(|parts| {
        parts
            .uri
            .query()?
            .strip_prefix("tenant=")
            .map(str::to_owned)
    });
    let layer = builder()
        .limit(Rule::new("per-tenant", per_minute(1), by_query))
        .build()
        .unwrap();
    let client = serve_layer(layer).await;
    assert_eq!(client.status("/?tenant=a", &[]).await, 200);
    assert_eq!(client.status("/?tenant=a", &[]).await, 429);
    assert_eq!(client.status("/?tenant=b", &[]).await, 200);
    assert_eq!(client.status("/?other=1", &[]).await, 400);
}

/// A `distinct` limit counts the member's distinct values per key: here at most 2
/// devices per API key per hour.
#[tokio::test]
async fn a_distinct_limit_counts_members_per_key() {
    let devices = Rule::new(
        "devices",
        limit(Algorithm::DISTINCT, 2, Duration::from_secs(3600)),
        KeyExtractor::header("x-api-key"),
    )
    .member(KeyExtractor::header("x-device"));
    let client = serve_layer(builder().limit(devices).build().unwrap()).await;
    let from = |device: &'static str| [("x-api-key", "k1"), ("x-device", device)];
    assert_eq!(client.status("/", &from("d1")).await, 200);
    assert_eq!(client.status("/", &from("d2")).await, 200);
    assert_eq!(client.status("/", &from("d3")).await, 429, "a third device");
    assert_eq!(
        client.status("/", &from("d1")).await,
        200,
        "a device already seen"
    );
    let other = [("x-api-key", "k2"), ("x-device", "d3")];
    assert_eq!(client.status("/", &other).await, 200, "another key");
    let missing = client.get("/", &[("x-api-key", "k1")]).await;
    assert_eq!(missing.status().as_u16(), 400);
    assert!(missing.text().await.unwrap().contains("x-device"));

    // Built wrong: a distinct limit without a member, a member on another limit.
    let bare = Rule::new(
        "devices",
        limit(Algorithm::DISTINCT, 2, Duration::from_secs(3600)),
        KeyExtractor::header("x-api-key"),
    );
    let err = builder().limit(bare).build().unwrap_err();
    assert!(err.to_string().contains("Rule::member"), "{err}");
    let extra = Rule::new("per-key", per_minute(1), KeyExtractor::header("x-api-key"))
        .member(KeyExtractor::header("x-device"));
    let err = builder().limit(extra).build().unwrap_err();
    assert!(
        err.to_string().contains("distinct and shares limits only"),
        "{err}"
    );
}
