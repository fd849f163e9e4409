//! A holder killed mid-hold: a process takes both slots of a `concurrency` limit on
//! Redis with `Limiter::hold` and is killed with SIGKILL (its guards never run). Its
//! slots come back when their lease ends, not before: on the caller's clock, a manual
//! one the child starts at too, so the test says exactly when.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use spillway_core::{Algorithm, Key, Limit, Limiter, ManualClock, Timestamp};
use spillway_testkit::redis::{standalone_url, unique_prefix};

const LEASE: Duration = Duration::from_secs(30);
const T0: u64 = 1_800_000_000;

/// A store on the caller's (manual) clock with keys under `prefix`.
async fn store(prefix: &str) -> spillway_redis::RedisStore {
    support::builder(&standalone_url())
        .prefix(prefix)
        .time_source(spillway_redis::TimeSource::Caller)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

fn limit() -> Limit {
    Limit::new(Algorithm::Concurrency, 2, LEASE).unwrap()
}

/// The child: takes both slots, says so, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn child_holds_until_killed() {
    let Ok(prefix) = std::env::var("SPILLWAY_HOLDER_PREFIX") else {
        return;
    };
    let store = store(&prefix).await;
    let limiter = Limiter::with_clock(store, ManualClock::new(Timestamp::from_secs(T0)));
    let key = Key::new("tenant").unwrap();
    let (a, first) = limiter.hold(&key, &limit(), 1).await.unwrap();
    let (b, second) = limiter.hold(&key, &limit(), 1).await.unwrap();
    assert!(a.allowed() && b.allowed());
    println!("\nHELD");
    std::future::pending::<()>().await;
    drop((first, second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_mid_hold_frees_its_slots_at_the_end_of_the_lease() {
    if std::env::var("SPILLWAY_HOLDER_PREFIX").is_ok() {
        return;
    }
    let prefix = unique_prefix("killed-holder");
    let (_, module) = module_path!().split_once("::").unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("{module}::child_holds_until_killed"),
            "--nocapture",
        ])
        .env("SPILLWAY_HOLDER_PREFIX", &prefix)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l == "HELD")),
        "the child never held"
    );
    // SIGKILL: no destructor, no release.
    child.kill().unwrap();
    child.wait().unwrap();

    let clock = ManualClock::new(Timestamp::from_secs(T0));
    let store = store(&prefix).await;
    let limiter = Limiter::with_clock(store, clock.clone());
    let (key, limit) = (Key::new("tenant").unwrap(), limit());
    let take = || limiter.acquire(&key, &limit, b"next", 1);
    let denied = take().await.unwrap();
    assert!(!denied.allowed(), "the dead holder's slots are still held");
    assert_eq!(denied.retry_after(), Some(LEASE));
    clock.advance(LEASE - Duration::from_micros(1));
    assert!(
        !take().await.unwrap().allowed(),
        "not before the lease ends"
    );
    clock.advance(Duration::from_micros(1));
    assert!(
        take().await.unwrap().allowed(),
        "free at the end of the lease"
    );
}
