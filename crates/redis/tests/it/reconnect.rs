//! A connection that stops answering without an error — its peer gone without a reset,
//! or bytes lost so replies no longer line up with requests — is replaced after a few
//! timeouts in a row. Reproduces the reliability suite's `proxy-drop` finding: with
//! the old connection kept, every later call timed out, forever.

use std::time::Duration;

use spillway_core::{Algorithm, Key, Limit, Request, Store, Timestamp};
use spillway_redis::RedisStore;
use spillway_testkit::proxy::{Proxy, ProxyMode};
use spillway_testkit::redis::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stops_answering_is_replaced() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.addr()).await;
    let store = RedisStore::builder(format!("redis://{}", proxy.addr()))
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let limit = Limit::new(Algorithm::SlidingLog, 1000, Duration::from_secs(60)).unwrap();
    let key = Key::new("reconnect").unwrap();
    let check = || store.check_one(Request::new(&key, &limit, 1), Timestamp::from_secs(1));
    check().await.unwrap();

    // Requests vanish on the way: they never reach Redis, no reply will ever come.
    proxy.set(ProxyMode::Blackhole);
    for _ in 0..3 {
        assert!(check().await.unwrap_err().is_transient());
    }
    proxy.set(ProxyMode::Pass);

    // The replacement connects in the background; the old connection would never
    // answer again (its reply queue is off by the lost requests).
    let mut attempts = 0;
    while check().await.is_err() {
        attempts += 1;
        assert!(attempts < 40, "no answer 2 s after the network came back");
    }
}
