//! The HTTP app in process (no socket): the same router the server serves, driven with
//! `tower::ServiceExt::oneshot`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use spillway_core::{ManualClock, MemoryStore, Timestamp};
use spillway_server::{AnyStore, App, Config};
use tower::ServiceExt;

#[tokio::test]
async fn the_router_answers_without_a_socket() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("in-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("p.yaml"), "domain: p\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n").unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1_700_000_000));
    let built = App::builder(Config::ephemeral(dir))
        .store(AnyStore::Memory(MemoryStore::new()))
        .clock(Arc::new(clock))
        .build()
        .await
        .unwrap();
    let app = spillway_server::http_app(std::sync::Arc::clone(built.state()));

    let call = |body: &'static str| {
        let app = app.clone();
        async move {
            let r = app
                .oneshot(Request::post("/v1/check").body(Body::from(body)).unwrap())
                .await
                .unwrap();
            let status = r.status().as_u16();
            let retry = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = r.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                retry,
                serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            )
        }
    };
    let req = r#"{"domain":"p","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#;
    assert_eq!(call(req).await.0, 200);
    let (status, retry, body) = call(req).await;
    assert_eq!(status, 429);
    // 1,700,000,000 is 800 s past an hour boundary: 2,800 s to the next.
    assert_eq!(retry.as_deref(), Some("2800"));
    assert_eq!(body["descriptors"][0]["retry_after_ms"], 2_800_000);
    assert_eq!(call(r#"{"domain":"p"}"#).await.0, 400);
}
