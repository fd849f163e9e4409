//! The store's timeout follows Redis's round trips (docs/stores.md, "Timeouts"): a
//! Redis slower than the timeout's floor has its first call time out, and the calls
//! after it answered, where a fixed timeout fails every one; and a store that never
//! answers still fails every call.

use std::time::Duration;

use spillway_core::{Algorithm, Error, Key, Limit, Request, Store, Timestamp};
use spillway_redis::RedisStore;
use spillway_testkit::proxy::{Proxy, ProxyMode};
use spillway_testkit::redis::{RedisServer, unique_prefix};

const FLOOR: Duration = Duration::from_millis(20);
/// Each call's request held this long on its way: above the floor, whatever the
/// machine's load (a busy machine only adds to it).
const DELAY: Duration = Duration::from_millis(30);

async fn store(proxy: &Proxy, ceiling: Duration) -> RedisStore {
    RedisStore::builder(format!("redis://{}", proxy.addr()))
        .prefix(unique_prefix("timeout"))
        .timeout(FLOOR)
        .timeout_ceiling(ceiling)
        .build()
        .await
        .unwrap()
}

/// Twenty calls one after another; which of them timed out.
async fn timed_out(store: &RedisStore) -> Vec<usize> {
    let limit = Limit::new(Algorithm::Gcra, 1_000_000, Duration::from_secs(1)).unwrap();
    let key = Key::new("slow").unwrap();
    let mut failed = Vec::new();
    for i in 0..20 {
        match store
            .check_one(Request::new(&key, &limit, 1), Timestamp::from_secs(1))
            .await
        {
            Ok(_) => {}
            Err(Error::Timeout(_)) => failed.push(i),
            Err(e) => panic!("call {i}: {e}"),
        }
    }
    failed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_slower_than_the_floor_gets_the_time_it_takes() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.addr()).await;
    // Built on a quick path (the first connection and its probe), then slowed.
    let adaptive = store(&proxy, Duration::from_secs(1)).await;
    let fixed = store(&proxy, FLOOR).await;
    proxy.set(ProxyMode::Delay(DELAY));

    let failed = timed_out(&fixed).await;
    assert_eq!(
        failed.len(),
        20,
        "a fixed 20 ms timeout fails every 30 ms call"
    );

    // The first call's timeout counts as a round trip of 20 ms: the next gets about
    // 60 ms. A busy machine may time out one or two more, raising it further.
    let failed = timed_out(&adaptive).await;
    assert!(
        failed.first() == Some(&0),
        "the first call times out: {failed:?}"
    );
    assert!(
        failed.len() <= 5,
        "the calls after it are answered: {failed:?}"
    );
    assert!(
        failed.iter().all(|&i| i < 10),
        "the last ten are answered: {failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_never_answers_still_fails_every_call() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.addr()).await;
    let store = store(&proxy, 2 * FLOOR).await;
    proxy.set(ProxyMode::Blackhole);
    let failed = timed_out(&store).await;
    assert_eq!(failed.len(), 20, "{failed:?}");
}
