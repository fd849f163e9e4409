//! A `concurrency` rule in the layer: an admitted request holds its slot for as long as
//! its response is being produced — until the response body ends or is dropped, or
//! the request's future is dropped before it answers — on the memory store (given back
//! in the drop) and on Redis (by a task).

use crate::support;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::{Extension, Router};
use bytes::Bytes;
use http::Request;
use http_body::Frame;
use http_body_util::BodyExt;
use spillway_core::{Algorithm, Limit, MemoryStore, Store};
use spillway_redis::{RedisStore, TimeSource};
use spillway_testkit::redis::{standalone_url, unique_prefix};
use spillway_tower::{HoldSlot, Holding, KeyExtractor, RateLimitLayer, Rule};
use tokio::sync::mpsc;
use tower::ServiceExt;

/// A response body that streams what its sender sends, until the sender is dropped.
struct Open(mpsc::UnboundedReceiver<Bytes>);

impl http_body::Body for Open {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// The senders of the bodies the app has answered with, in order.
type Senders = Arc<Mutex<Vec<mpsc::UnboundedSender<Bytes>>>>;

/// The holds `/ws` took from its requests, as a service keeps them for an upgraded
/// connection: dropped, the connection is over.
type Kept = Arc<Mutex<Vec<Holding>>>;

fn app<St: Store + 'static>(store: St, clock: spillway_core::ManualClock) -> (Router, Senders) {
    let (router, senders, _) = app_kept(store, clock);
    (router, senders)
}

fn app_kept<St: Store + 'static>(
    store: St,
    clock: spillway_core::ManualClock,
) -> (Router, Senders, Kept) {
    let holds = Limit::new(Algorithm::Concurrency, 1, Duration::from_secs(30)).unwrap();
    let layer = RateLimitLayer::builder(store)
        .clock(clock)
        .timeout(Duration::from_secs(1))
        .limit(Rule::new(
            "in-flight",
            holds,
            KeyExtractor::header("x-tenant"),
        ))
        .build()
        .unwrap();
    let senders = Senders::default();
    let answered = Arc::clone(&senders);
    let kept = Kept::default();
    let kept_by_ws = Arc::clone(&kept);
    let router = Router::new()
        .route(
            "/stream",
            get(move || {
                let answered = Arc::clone(&answered);
                async move {
                    let (tx, rx) = mpsc::unbounded_channel();
                    answered.lock().unwrap().push(tx);
                    Body::new(Open(rx))
                }
            }),
        )
        .route("/never", get(std::future::pending::<&'static str>))
        // An upgrade that keeps nothing: its 101's empty body gives the hold back.
        .route(
            "/upgrade",
            get(|| async { http::StatusCode::SWITCHING_PROTOCOLS }),
        )
        // An upgrade whose connection keeps the request's hold.
        .route(
            "/ws",
            get(move |Extension(slot): Extension<HoldSlot>| async move {
                kept_by_ws.lock().unwrap().extend(slot.take());
                http::StatusCode::SWITCHING_PROTOCOLS
            }),
        )
        .layer(layer);
    (router, senders, kept)
}

async fn call(app: &Router, path: &str) -> http::Response<Body> {
    let request = Request::get(path)
        .header("x-tenant", "acme")
        .body(Body::empty());
    app.clone().oneshot(request.unwrap()).await.unwrap()
}

/// Polls `status` of a fresh call until it is `want`, the release being a task on
/// Redis (on the memory store it is given back in the drop: the first call sees it).
async fn until_status(app: &Router, want: u16, local: bool) -> http::Response<Body> {
    for _ in 0..500 {
        let response = call(app, "/stream").await;
        if response.status() == want || local {
            return response;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("never {want}")
}

async fn held_while_the_body_streams<St: Store + 'static>(store: St, local: bool) {
    let (app, senders) = app(store, support::clock());
    let first = call(&app, "/stream").await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        call(&app, "/stream").await.status(),
        429,
        "held while it streams"
    );

    // Dropped mid-stream (a client gone): the slot is free.
    drop(first);
    let second = until_status(&app, 200, local).await;
    assert_eq!(second.status(), 200, "given back when the body was dropped");
    assert_eq!(call(&app, "/stream").await.status(), 429);

    // Read to its end, the body gives its slot back, though not dropped yet.
    let mut body = second.into_body();
    let tx = senders.lock().unwrap().pop().unwrap();
    tx.send(Bytes::from_static(b"chunk")).unwrap();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "chunk"
    );
    assert_eq!(call(&app, "/stream").await.status(), 429, "still streaming");
    drop(tx);
    assert!(body.frame().await.is_none());
    let third = until_status(&app, 200, local).await;
    assert_eq!(third.status(), 200, "given back at the body's end");
    drop((body, third));

    // A request whose future is dropped before its answer (the client gone while the
    // service works) gives its slot back too.
    // (Admitted once the slot the last body held is back: on Redis a task gives it.)
    let mut admitted = false;
    for _ in 0..500 {
        match tokio::time::timeout(Duration::from_millis(50), call(&app, "/never")).await {
            Err(_) => {
                admitted = true;
                break;
            }
            Ok(denied) => assert_eq!(denied.status(), 429),
        }
        assert!(!local, "on the memory store the slot is back at once");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        admitted,
        "the service never answers: the request waited, holding its slot"
    );
    let after = until_status(&app, 200, local).await;
    assert_eq!(
        after.status(),
        200,
        "given back when the future was dropped"
    );
}

#[tokio::test]
async fn a_slot_is_held_while_the_body_streams_on_the_memory_store() {
    held_while_the_body_streams(MemoryStore::new(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_is_held_while_the_body_streams_on_redis() {
    let store = RedisStore::builder(standalone_url())
        .prefix(unique_prefix("tower-holds"))
        .time_source(TimeSource::Caller)
        .build()
        .await
        .unwrap();
    held_while_the_body_streams(store, false).await;
}

/// A response body that lives past three leases keeps its slot: the layer renews its
/// hold every half lease (tokio's paused time and the layer's manual clock advanced
/// together, a second at a time); once the body ends the slot is free. Without the
/// renewal the hold would lapse at 30 s and the second request be admitted.
#[tokio::test(start_paused = true)]
async fn a_body_held_open_past_three_leases_keeps_its_slot() {
    let clock = support::clock();
    let (app, senders) = app(MemoryStore::new(), clock.clone());
    let first = call(&app, "/stream").await;
    assert_eq!(first.status(), 200);
    let second_at = |seconds: u64| format!("a second request at {seconds} s");
    for second in 1..=95 {
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(1)).await;
        if second % 10 == 0 {
            let refused = call(&app, "/stream").await.status();
            assert_eq!(refused, 429, "{}", second_at(second));
        }
    }
    // The body ends: its slot is free.
    let mut body = first.into_body();
    drop(senders.lock().unwrap().pop());
    assert!(body.frame().await.is_none());
    assert_eq!(
        call(&app, "/stream").await.status(),
        200,
        "after the body ended"
    );
}

/// An upgrade (101): a service that keeps nothing gives the hold back with the 101's
/// empty body; one that takes the request's [`HoldSlot`] keeps the slot, renewed past
/// three leases, until it drops what it took (its connection closed).
#[tokio::test(start_paused = true)]
async fn an_upgraded_connection_keeps_its_slot_only_when_it_takes_it() {
    let clock = support::clock();
    let (app, _senders, kept) = app_kept(MemoryStore::new(), clock.clone());
    let upgraded = call(&app, "/upgrade").await;
    assert_eq!(upgraded.status(), 101);
    drop(upgraded);
    assert_eq!(
        call(&app, "/upgrade").await.status(),
        101,
        "given back with the 101"
    );

    let ws = call(&app, "/ws").await;
    assert_eq!(ws.status(), 101);
    drop(ws);
    assert_eq!(kept.lock().unwrap().len(), 1);
    for _ in 0..95 {
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        call(&app, "/ws").await.status(),
        429,
        "the connection lives"
    );
    kept.lock().unwrap().clear();
    assert_eq!(
        call(&app, "/ws").await.status(),
        101,
        "the connection closed"
    );
}

/// An app whose layer holds one of `acme`'s 3 slots per request, on Redis reached at
/// `redis` (a connection of its own) under `prefix`, its store calls timing out at
/// 300 ms, on a manual clock that stands still (a free slot was given back, not
/// lapsed).
async fn on_redis_at(redis: std::net::SocketAddr, prefix: &str) -> Router {
    let store = RedisStore::builder(format!("redis://{redis}"))
        .prefix(prefix)
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let holds = Limit::new(Algorithm::Concurrency, 3, Duration::from_secs(30)).unwrap();
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/never", get(std::future::pending::<&'static str>))
        .layer(
            RateLimitLayer::builder(store)
                .clock(support::clock())
                .timeout(Duration::from_millis(300))
                .limit(Rule::new(
                    "in-flight",
                    holds,
                    KeyExtractor::header("x-tenant"),
                ))
                .build()
                .unwrap(),
        )
}

/// Waits (at most 20 s) until three requests of `acme` hold a slot at once on `app`
/// (each waits in a service that never answers, and is dropped after 500 ms).
async fn until_three_fit(app: &Router) {
    use spillway_core::{Clock, SystemClock};
    let start = SystemClock.now();
    loop {
        let mut held = Vec::new();
        for _ in 0..3 {
            let r = tokio::time::timeout(Duration::from_millis(500), call(app, "/never")).await;
            held.push(r.is_err());
        }
        if held == [true, true, true] {
            return;
        }
        assert!(
            SystemClock.now().duration_since(start) < Duration::from_secs(20),
            "slots still held: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// #60: the guard that gives a hold back was made only after the store call returned:
/// a request dropped during it (its client gone) left its hold to the lease. Redis
/// behind a proxy that delays it a second, so the take is on its way when the request
/// is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_during_the_store_call_gives_its_slot_back() {
    use spillway_testkit::proxy::{Proxy, ProxyMode};
    let redis = standalone_url()
        .trim_start_matches("redis://")
        .parse()
        .unwrap();
    let proxy = Proxy::start(redis).await;
    let app = on_redis_at(proxy.addr(), &unique_prefix("tower-dropped")).await;
    proxy.set(ProxyMode::Delay(Duration::from_secs(1)));
    for _ in 0..3 {
        let dropped = tokio::time::timeout(Duration::from_millis(100), call(&app, "/")).await;
        assert!(dropped.is_err(), "answered within 100 ms");
    }
    proxy.set(ProxyMode::Pass);
    until_three_fit(&app).await;
}

/// #60, as above for a store call the layer timed out (300 ms) after its take was
/// sent: the take commits a second later, and the layer (its failure policy `open`
/// let the request through) gives it back. Three app instances, each a connection
/// of its own, so each take is sent at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_the_store_timed_out_on_gives_its_slot_back() {
    use spillway_testkit::proxy::{Proxy, ProxyMode};
    let redis = standalone_url()
        .trim_start_matches("redis://")
        .parse()
        .unwrap();
    let proxy = Proxy::start(redis).await;
    let prefix = unique_prefix("tower-timed-out");
    let mut apps = Vec::new();
    for _ in 0..3 {
        let app = on_redis_at(proxy.addr(), &prefix).await;
        // Connected, its script loaded: the take below is the only command sent.
        assert_eq!(call(&app, "/").await.status(), 200);
        apps.push(app);
    }
    until_three_fit(&apps[0]).await;
    proxy.set(ProxyMode::Delay(Duration::from_secs(1)));
    let (a, b, c) = tokio::join!(
        call(&apps[0], "/"),
        call(&apps[1], "/"),
        call(&apps[2], "/")
    );
    for answer in [a, b, c] {
        assert_eq!(answer.status(), 200, "the failure policy is open");
    }
    proxy.set(ProxyMode::Pass);
    until_three_fit(&apps[0]).await;
}

#[test]
fn a_concurrency_rule_takes_no_member_and_cannot_be_metered() {
    let holds = Limit::new(Algorithm::Concurrency, 3, Duration::from_secs(30)).unwrap();
    let rule = || Rule::new("in-flight", holds.clone(), KeyExtractor::header("x-tenant"));
    let member = RateLimitLayer::builder(MemoryStore::new())
        .limit(rule().member(KeyExtractor::header("x-id")))
        .build()
        .unwrap_err();
    assert!(
        member.to_string().contains("named by the layer"),
        "{member}"
    );
    let metered = RateLimitLayer::builder(MemoryStore::new())
        .limit(rule().metered(|_| Some(1)))
        .build()
        .unwrap_err();
    assert!(metered.to_string().contains("not concurrency"), "{metered}");
}
