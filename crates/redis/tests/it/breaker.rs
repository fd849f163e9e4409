//! The circuit breaker in front of a real Redis: a stall that times out a round of calls
//! among many leaves it closed, and a dead server opens it within the documented time
//! (docs/service.md, "When the store fails": failures at least half the last second's
//! calls). Calls are real; the decisions' clock is manual, 10 calls every 10 ms.

use std::time::Duration;

use spillway_core::{
    Algorithm, Breaker, BreakerState, Guard, GuardedStore, Key, Limit, Mode, OnStoreError, Request,
    Timestamp,
};
use spillway_redis::{RedisStore, TimeSource};
use spillway_testkit::redis::{RedisServer, unique_prefix};

use crate::support;

/// Calls at once, every step of the manual clock.
const ROUND: usize = 10;
const STEP: Duration = Duration::from_millis(10);

/// One round of `ROUND` decisions at `now`, each on a key of its own; how many failed.
async fn round(store: &GuardedStore<RedisStore>, limit: &Limit, n: usize, now: Timestamp) -> usize {
    let keys: Vec<Key> = (0..ROUND)
        .map(|i| Key::new(format!("k{}", n * ROUND + i)).unwrap())
        .collect();
    let guard = [Guard::new(Mode::Enforce, OnStoreError::Open)];
    let calls = keys.iter().map(|key| {
        let request = [Request::new(key, limit, 1)];
        async move { store.decide(&request, &guard, now).await }
    });
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .filter(|answer| answer.as_ref().unwrap().failure.is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_among_many_calls_leaves_it_closed_and_a_dead_server_opens_it_within_the_window() {
    let server = RedisServer::start();
    // Long enough that a busy machine's calls do not time out on their own; a stopped
    // server's do, whatever the timeout.
    let redis = support::builder(&server.url())
        .prefix(unique_prefix("breaker"))
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let store = GuardedStore::new(redis, Breaker::new(5, Duration::from_millis(500)));
    let limit = Limit::new(Algorithm::Gcra, 1_000_000, Duration::from_secs(1)).unwrap();
    let mut now = Timestamp::from_secs(1_700_000_000);
    let mut n = 0;

    // Two seconds at 1,000 calls a second; three stalls (the server stopped for one
    // round: its ten calls time out together, ten failures in a row).
    let mut failed = 0;
    for i in 0..200 {
        let stall = i % 60 == 59;
        if stall {
            server.signal("STOP");
        }
        failed += round(&store, &limit, n, now).await;
        if stall {
            server.signal("CONT");
        }
        assert_eq!(
            store.breaker().state(),
            BreakerState::Closed,
            "round {i}: {failed} failed"
        );
        (n, now) = (n + 1, now.saturating_add(STEP));
    }
    assert!(
        failed >= 3 * ROUND,
        "the stalls timed out their rounds: {failed}"
    );

    // Dead: every call fails. Open once the failures are half the sliding second's
    // calls: after about half a second (the second before had 20 failures in 1,000).
    server.signal("STOP");
    let mut rounds = 0;
    while store.breaker().state() == BreakerState::Closed {
        assert!(
            rounds < 100,
            "still closed after {rounds} rounds of failures"
        );
        round(&store, &limit, n, now).await;
        (n, now, rounds) = (n + 1, now.saturating_add(STEP), rounds + 1);
    }
    assert!(
        (40..=60).contains(&rounds),
        "opened after {rounds} rounds (10 ms each)"
    );
    // Open: the failure policy answers, and the server is not called.
    let key = Key::new("open").unwrap();
    let guard = [Guard::new(Mode::Enforce, OnStoreError::Open)];
    let answer = store
        .decide(&[Request::new(&key, &limit, 1)], &guard, now)
        .await
        .unwrap();
    assert_eq!(answer.failure.map(|f| f.kind()), Some("breaker_open"));

    // Back: after the cool-down a probe goes through, and its answer closes it.
    server.signal("CONT");
    for probe in 0.. {
        assert!(probe < 10, "no probe closed it");
        now = now.saturating_add(Duration::from_millis(500));
        let _ = store
            .decide(&[Request::new(&key, &limit, 1)], &guard, now)
            .await;
        if store.breaker().state() == BreakerState::Closed {
            break;
        }
    }
    assert_eq!(round(&store, &limit, n + 1, now).await, 0);
}
