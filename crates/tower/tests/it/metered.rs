//! A metered rule (`Rule::metered`): the request's estimate (from a request header) is
//! reserved before the handler runs, and settled with what the response's
//! `x-tokens-used` says it used: the rest given back, the excess charged into debt.
//! Over a real loopback socket, on the memory store with a manual clock and on Redis.

use crate::support;

use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::get;
use spillway_core::{Algorithm, Clock, MemoryStore, Store};
use spillway_tower::{KeyExtractor, Mode, RateLimitLayer, Rule};
use support::{clock, header, limit, serve};

/// Reads a number from a header.
fn number(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

/// 1,000 tokens a minute per `x-tenant`: each request reserves its `x-estimate` and
/// reports the `x-use` it is asked to, as `x-tokens-used`.
fn app<St: Store + 'static, C: Clock + 'static>(
    store: St,
    clock: C,
    algorithm: Algorithm,
    mode: Mode,
) -> Router {
    let tokens = limit(algorithm, 1000, Duration::from_secs(60));
    let rule = Rule::new("tokens", tokens, KeyExtractor::header("x-tenant"))
        .cost(|parts| number(&parts.headers, "x-estimate").unwrap_or(1))
        .metered(|headers| number(headers, "x-tokens-used"));
    let layer = RateLimitLayer::builder(store)
        .clock(clock)
        .limit(rule)
        .mode(mode)
        .headers_on_allowed(true)
        .build()
        .unwrap();
    Router::new()
        .route(
            "/",
            get(|headers: HeaderMap| async move {
                let used = headers.get("x-use").map(|v| v.to_str().unwrap().to_owned());
                match used {
                    Some(used) => ([("x-tokens-used", used)], "answered").into_response(),
                    None => "answered, no count".into_response(),
                }
            }),
        )
        .layer(layer)
}

async fn run(client: &support::Client, tenant: &str) {
    let call = |estimate: &'static str, used: Option<&'static str>| {
        let mut headers = vec![
            ("x-tenant", tenant.to_owned()),
            ("x-estimate", estimate.into()),
        ];
        if let Some(used) = used {
            headers.push(("x-use", used.into()));
        }
        let client = client.clone();
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            client.get("/", &headers).await
        }
    };
    let left = |r: &reqwest::Response| header(r, "ratelimit").to_owned();
    // 600 reserved, 100 used: 500 given back, 900 left.
    assert_eq!(call("600", Some("100")).await.status(), 200);
    let peek = call("0", None).await;
    assert!(
        left(&peek).starts_with(r#""tokens";r=900;"#),
        "{}",
        left(&peek)
    );
    // 800 reserved, 1,500 used: 700 past the estimate, into debt (900 − 1,500).
    assert_eq!(call("800", Some("1500")).await.status(), 200);
    // In debt: even an estimate of 1 is refused.
    assert_eq!(call("1", Some("1")).await.status(), 429);
}

#[tokio::test]
async fn a_metered_rule_settles_with_what_the_response_used() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ] {
        let clock = clock();
        let client = serve(app(
            MemoryStore::new(),
            clock.clone(),
            algorithm,
            Mode::Enforce,
        ))
        .await;
        run(&client, "t1").await;
        // A window later (or 60 s of refill), the debt of 600 is paid back for the
        // bucket and the fixed window starts again.
        clock.advance(Duration::from_secs(60));
        let after = client
            .get("/", &[("x-tenant", "t1"), ("x-estimate", "1")])
            .await;
        assert_eq!(after.status(), 200, "{algorithm}");
    }
}

#[tokio::test]
async fn a_metered_rule_settles_on_redis() {
    for (name, url) in [
        ("standalone", spillway_testkit::redis::standalone_url()),
        ("cluster", spillway_testkit::redis::cluster_url()),
    ] {
        let store = spillway_redis::RedisStore::builder(url)
            .prefix(spillway_testkit::redis::unique_prefix("tower-metered"))
            .time_source(spillway_redis::TimeSource::Caller)
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .unwrap();
        let client = serve(app(store, clock(), Algorithm::TokenBucket, Mode::Enforce)).await;
        run(&client, &format!("t-{name}")).await;
    }
}

/// In shadow mode a request over the limit still reaches the handler: nothing was
/// reserved, so what it used is charged in full.
#[tokio::test]
async fn in_shadow_mode_what_a_passed_request_used_is_charged_in_full() {
    let clock = clock();
    let client = serve(app(
        MemoryStore::new(),
        clock.clone(),
        Algorithm::FixedWindow,
        Mode::Shadow,
    ))
    .await;
    let tenant = [("x-tenant", "t1"), ("x-estimate", "2000"), ("x-use", "300")];
    // 2,000 cannot fit 1,000: passed in shadow, not reserved; 300 charged.
    assert_eq!(client.status("/", &tenant).await, 200);
    let peek = client
        .get("/", &[("x-tenant", "t1"), ("x-estimate", "0")])
        .await;
    assert!(
        header(&peek, "ratelimit").starts_with(r#""tokens";r=700;"#),
        "{}",
        header(&peek, "ratelimit")
    );
}

#[test]
fn a_metered_rule_must_be_able_to_give_back() {
    let log = limit(Algorithm::SlidingLog, 10, Duration::from_secs(60));
    let rule = Rule::new("tokens", log, KeyExtractor::header("x-tenant")).metered(|_| Some(1));
    let e = RateLimitLayer::builder(MemoryStore::new())
        .limit(rule)
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("fixed_window, token_bucket or gcra"), "{e}");
}

/// An estimate of 0 is a look: admitted while the budget is not in debt, then charged
/// what the response used (Envoy's two calls, in one layer). 600 used twice drives
/// 1,000 into debt; the next look is refused.
#[tokio::test]
async fn a_look_then_usage_charges_what_the_response_used() {
    let client = serve(app(
        MemoryStore::new(),
        clock(),
        Algorithm::TokenBucket,
        Mode::Enforce,
    ))
    .await;
    let look_using = |used: &'static str| {
        let client = client.clone();
        async move {
            client
                .get(
                    "/",
                    &[("x-tenant", "t1"), ("x-estimate", "0"), ("x-use", used)],
                )
                .await
        }
    };
    assert_eq!(look_using("600").await.status(), 200);
    let peek = client
        .get("/", &[("x-tenant", "t1"), ("x-estimate", "0")])
        .await;
    let left = header(&peek, "ratelimit").to_owned();
    assert!(left.starts_with(r#""tokens";r=400;"#), "{left}");
    assert_eq!(look_using("600").await.status(), 200, "not in debt yet");
    assert_eq!(look_using("1").await.status(), 429, "200 in debt");
}

/// `actual` answering `None` (the response said nothing of what it used) keeps the
/// estimate charged: it is what the work most likely used.
#[tokio::test]
async fn a_response_that_says_nothing_keeps_the_estimate() {
    let client = serve(app(
        MemoryStore::new(),
        clock(),
        Algorithm::FixedWindow,
        Mode::Enforce,
    ))
    .await;
    let r = client
        .get("/", &[("x-tenant", "t1"), ("x-estimate", "300")])
        .await;
    assert_eq!(r.status(), 200);
    let peek = client
        .get("/", &[("x-tenant", "t1"), ("x-estimate", "0")])
        .await;
    let left = header(&peek, "ratelimit").to_owned();
    assert!(left.starts_with(r#""tokens";r=700;"#), "{left}");
}

/// A store that fails its first call, then answers (a blip).
#[derive(Clone)]
struct FailsFirst {
    store: MemoryStore,
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Store for FailsFirst {
    async fn check(
        &self,
        requests: &[spillway_core::Request<'_>],
        now: spillway_core::Timestamp,
    ) -> Result<spillway_core::BatchDecision, spillway_core::Error> {
        if !self.failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return Err(spillway_core::Error::Store {
                source: "a blip".into(),
                transient: true,
            });
        }
        self.store.check(requests, now).await
    }

    async fn reset(
        &self,
        key: &spillway_core::Key,
        limit: &spillway_core::Limit,
        now: spillway_core::Timestamp,
    ) -> Result<(), spillway_core::Error> {
        self.store.reset(key, limit, now).await
    }
}

/// Under `open`, a request the failing store could not reserve for is let through
/// unreserved, and what its response used is charged in full once the store answers.
#[tokio::test]
async fn under_open_a_request_let_through_is_charged_what_it_used_in_full() {
    let memory = MemoryStore::new();
    let store = FailsFirst {
        store: memory.clone(),
        failed: Default::default(),
    };
    let tokens = limit(Algorithm::TokenBucket, 1000, Duration::from_secs(60));
    let rule = Rule::new("tokens", tokens, KeyExtractor::header("x-tenant"))
        .cost(|parts| number(&parts.headers, "x-estimate").unwrap_or(1))
        .metered(|headers| number(headers, "x-tokens-used"));
    let layer = RateLimitLayer::builder(store)
        .clock(clock())
        .limit(rule)
        .on_store_error(spillway_core::OnStoreError::Open)
        .headers_on_allowed(true)
        .build()
        .unwrap();
    let router = Router::new()
        .route(
            "/",
            get(|| async { ([("x-tokens-used", "450")], "answered").into_response() }),
        )
        .layer(layer);
    let client = serve(router).await;
    let r = client
        .get("/", &[("x-tenant", "t1"), ("x-estimate", "100")])
        .await;
    assert_eq!(r.status(), 200, "let through by `open`");
    let peek = client
        .get("/", &[("x-tenant", "t1"), ("x-estimate", "0")])
        .await;
    let left = header(&peek, "ratelimit").to_owned();
    assert!(
        left.starts_with(r#""tokens";r=550;"#),
        "450 charged in full: {left}"
    );
}

#[test]
fn a_metered_rule_takes_no_lease_or_sync() {
    let window = limit(Algorithm::FixedWindow, 100, Duration::from_secs(60));
    for rule in [
        Rule::new("tokens", window.clone(), KeyExtractor::header("x-tenant")).lease(10),
        Rule::new("tokens", window.clone(), KeyExtractor::header("x-tenant"))
            .sync(Duration::from_millis(100)),
    ] {
        let e = RateLimitLayer::builder(MemoryStore::new())
            .limit(rule.metered(|_| Some(1)))
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("not with lease or sync"), "{e}");
    }
}
