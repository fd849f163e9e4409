//! The `Limiter` facade: what users hold.

use std::time::Duration;

use spillway_core::{
    Algorithm, Key, Limit, Limiter, ManualClock, MemoryStore, Outcome, Request, Timestamp,
};

fn limiter() -> (Limiter<MemoryStore, ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(1_702_080_000));
    (
        Limiter::with_clock(MemoryStore::new(), clock.clone()),
        clock,
    )
}

#[tokio::test]
async fn peek_reports_without_consuming_and_reset_forgets() {
    let (limiter, _) = limiter();
    let limit = Limit::new(Algorithm::SlidingLog, 3, Duration::from_secs(1)).unwrap();
    let key = Key::new("k").unwrap();
    assert_eq!(limiter.check_n(&key, &limit, 2).await.unwrap().remaining, 1);
    for _ in 0..3 {
        let peek = limiter.peek(&key, &limit).await.unwrap();
        assert!(peek.allowed());
        assert_eq!(peek.remaining, 1);
    }
    assert!(!limiter.check_n(&key, &limit, 2).await.unwrap().allowed());
    limiter.reset(&key, &limit).await.unwrap();
    assert_eq!(limiter.check_n(&key, &limit, 3).await.unwrap().remaining, 0);
}

#[tokio::test]
async fn clones_share_state_instead_of_multiplying_the_limit() {
    let (limiter, _) = limiter();
    let copy = limiter.clone();
    let limit = Limit::new(Algorithm::Gcra, 2, Duration::from_secs(60)).unwrap();
    let key = Key::new("k").unwrap();
    assert!(limiter.check(&key, &limit).await.unwrap().allowed());
    assert!(copy.check(&key, &limit).await.unwrap().allowed());
    assert!(!limiter.check(&key, &limit).await.unwrap().allowed());
    assert!(!copy.check(&key, &limit).await.unwrap().allowed());
}

#[tokio::test]
async fn invalid_costs_are_refused_before_the_store() {
    let (limiter, _) = limiter();
    let limit = Limit::new(Algorithm::FixedWindow, 2, Duration::from_secs(1)).unwrap();
    let key = Key::new("k").unwrap();
    let err = limiter
        .check_n(&key, &limit, (1 << 53) + 1)
        .await
        .unwrap_err();
    assert!(err.is_invalid_input() && !err.is_transient(), "{err}");
    let many: Vec<Request<'_>> = (0..100).map(|_| Request::new(&key, &limit, 1)).collect();
    assert!(
        limiter
            .check_all(&many)
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    assert!(limiter.store().is_empty());
}

#[tokio::test]
async fn a_clock_stepping_back_never_hands_out_a_fresh_window() {
    // NTP steps the wall clock back 5 s, into the previous window: the key's time stands
    // still at the newest it has seen instead of running backwards.
    for algorithm in Algorithm::ALL {
        let (limiter, clock) = limiter();
        let limit = Limit::new(algorithm, 2, Duration::from_secs(10)).unwrap();
        let key = Key::new("k").unwrap();
        clock.advance(Duration::from_secs(1));
        assert!(
            limiter.check_n(&key, &limit, 2).await.unwrap().allowed(),
            "{algorithm}"
        );
        clock.set(Timestamp::from_secs(1_702_080_000 - 5));
        let d = limiter.check(&key, &limit).await.unwrap();
        assert!(
            matches!(d.outcome, Outcome::Denied { .. }),
            "{algorithm}: {d:?}"
        );
    }
}
