//! Graceful shutdown: a request in flight when shutdown begins still gets its answer;
//! new connections are refused; the service then stops. (It reads the process-wide
//! request counter: `recorder/main.rs`.)

use crate::support;

use std::time::Duration;

use serde_json::json;
use spillway_policy::OnStoreError;
use spillway_testkit::redis::RedisServer;
use support::{Backing, Server};

const HTTP_REQUESTS: &str = r#"spillway_requests_total{api="http"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_finish_after_shutdown_begins() {
    let _turn = crate::turn().await;
    let redis = RedisServer::start();
    let s = Server::start_with(
        "drain",
        &[("d.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n")],
        Backing::Redis(redis.url()),
        |st| {
            st.store.on_error = OnStoreError::Open;
            st.store.timeout = Duration::from_secs(1);
        },
    )
    .await;
    // A frozen Redis holds the request in the store call for the whole timeout.
    redis.signal("STOP");
    let before = crate::value(&s.get_text("/metrics").await, HTTP_REQUESTS);
    let url = s.url("/v1/check");
    let client = s.http.clone();
    let in_flight = tokio::spawn(async move {
        client
            .post(url)
            .json(&json!({ "domain": "d", "descriptors": [{ "entries": [{ "key": "k", "value": "v" }] }] }))
            .send()
            .await
    });
    // Wait until the server has the request (its counter says so), then shut down.
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let text = s.get_text("/metrics").await;
            if crate::value(&text, HTTP_REQUESTS) == before + 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the request reached the server");
    s.running.shutdown.cancel();

    let answer = in_flight
        .await
        .unwrap()
        .expect("the request in flight was answered");
    assert_eq!(answer.status().as_u16(), 200, "on_store_error: open");
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["descriptors"][0]["degraded"], true);

    let addr = s.running.http_addr;
    s.running.wait().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
    redis.signal("CONT");
}
