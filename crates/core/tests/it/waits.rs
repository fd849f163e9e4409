//! Waiting for a turn (`max_wait`): a request a `gcra` or `token_bucket` limit would
//! deny now but admit within the wait is admitted *after* it, its slot reserved at
//! once; the queue is first come, first served, and never lets more go ahead than the
//! limit promises (the property tests check the bound at the times requests go ahead).

use std::time::Duration;

use spillway_core::{Algorithm, Key, Limit, Limiter, ManualClock, MemoryStore, Outcome, Timestamp};

const T0: u64 = 1_700_000_000;

fn waiting(algorithm: Algorithm, wait_ms: u64) -> Limit {
    Limit::builder(algorithm, 10, Duration::from_secs(1))
        .burst(1)
        .max_wait(Duration::from_millis(wait_ms))
        .build()
        .unwrap()
}

/// Ten a second, a burst of one, waits up to 500 ms: seven requests at once go ahead
/// at 0, 100, …, 500 ms; the seventh would go at 600 ms, past the wait: denied, until
/// 100 ms later, when it is admitted after a wait of 500 ms. The same on both
/// algorithms that wait.
#[tokio::test]
async fn requests_over_the_rate_wait_their_turn_in_order_up_to_max_wait() {
    for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
        let limit = waiting(algorithm, 500);
        let clock = ManualClock::new(Timestamp::from_secs(T0));
        let limiter = Limiter::with_clock(MemoryStore::new(), clock.clone());
        let key = Key::new("user:1").unwrap();
        let mut waits = Vec::new();
        for _ in 0..6 {
            let d = limiter.check(&key, &limit).await.unwrap();
            assert!(d.allowed(), "{algorithm}: {d:?}");
            waits.push(d.wait.as_millis());
        }
        assert_eq!(waits, [0, 100, 200, 300, 400, 500], "{algorithm}");
        let seventh = limiter.check(&key, &limit).await.unwrap();
        assert_eq!(
            seventh.outcome,
            Outcome::Denied {
                retry_after: Duration::from_millis(100)
            },
            "{algorithm}: until it may wait"
        );
        assert!(seventh.wait.is_zero());
        clock.advance(Duration::from_millis(100));
        let later = limiter.check(&key, &limit).await.unwrap();
        assert!(later.allowed(), "{algorithm}");
        assert_eq!(later.wait, Duration::from_millis(500), "{algorithm}");
        assert_eq!(later.remaining, 0);
    }
}

/// A cost that can never fit is refused for good, waiting or not; a peek (cost 0)
/// never waits and reserves nothing.
#[tokio::test]
async fn a_peek_never_waits_and_an_impossible_cost_is_refused() {
    let limit = waiting(Algorithm::Gcra, 500);
    let clock = ManualClock::new(Timestamp::from_secs(T0));
    let limiter = Limiter::with_clock(MemoryStore::new(), clock.clone());
    let key = Key::new("user:2").unwrap();
    assert_eq!(
        limiter.check_n(&key, &limit, 2).await.unwrap().outcome,
        Outcome::CostExceedsCapacity
    );
    for _ in 0..3 {
        limiter.check(&key, &limit).await.unwrap();
    }
    let peek = limiter.check_n(&key, &limit, 0).await.unwrap();
    assert!(peek.wait.is_zero());
    // The peek took nothing: the next waits 300 ms, after the three before it.
    let next = limiter.check(&key, &limit).await.unwrap();
    assert_eq!(next.wait, Duration::from_millis(300));
}

/// `Limiter::check_waiting` sleeps through the wait (tokio's timer, paused here) and then
/// returns the admission.
#[tokio::test(start_paused = true)]
async fn check_waiting_returns_once_the_wait_is_over() {
    let limit = waiting(Algorithm::TokenBucket, 1000);
    let limiter = Limiter::with_clock(
        MemoryStore::new(),
        ManualClock::new(Timestamp::from_secs(T0)),
    );
    let key = Key::new("user:3").unwrap();
    limiter.check_waiting(&key, &limit, 1).await.unwrap();
    let started = tokio::time::Instant::now();
    let d = limiter.check_waiting(&key, &limit, 1).await.unwrap();
    assert!(d.allowed());
    assert_eq!(started.elapsed(), Duration::from_millis(100));
}

/// Only the algorithms that know when a request conforms wait; the wait is bounded.
#[test]
fn max_wait_is_refused_where_it_cannot_apply() {
    let err = Limit::builder(Algorithm::FixedWindow, 10, Duration::from_secs(1))
        .max_wait(Duration::from_millis(100))
        .build()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("max_wait applies to token_bucket, gcra, shares and concurrency"),
        "{err}"
    );
    let err = Limit::builder(Algorithm::Gcra, 10, Duration::from_secs(1))
        .max_wait(Duration::from_secs(7200))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("up to an hour"), "{err}");
    let limit = waiting(Algorithm::Gcra, 250);
    assert_eq!(limit.max_wait(), Duration::from_millis(250));
    assert!(limit.to_string().contains("waiting up to 250ms"), "{limit}");
}
