use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Timeouts, by};

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_store_nearby_keeps_the_floor() {
    let t = Timeouts::new(10 * MS, 20 * MS);
    assert_eq!(t.current(), 10 * MS);
    // Round trips of 0.2–2 ms, an occasional one ten times the usual.
    for i in 0..1000u64 {
        t.answered(Duration::from_micros(200 + (i * 7919) % 1800));
        assert_eq!(t.current(), 10 * MS, "after {i} round trips");
    }
}

#[test]
fn slow_varied_round_trips_raise_it_up_to_the_ceiling() {
    let t = Timeouts::new(10 * MS, 40 * MS);
    for i in 0..200 {
        t.answered(if i % 2 == 0 { 4 * MS } else { 12 * MS });
    }
    // About 8 ms ± 4 ms: 8 + 4 × 4.
    let now = t.current();
    assert!(now > 20 * MS && now < 30 * MS, "{now:?}");
    let capped = Timeouts::new(10 * MS, 20 * MS);
    for i in 0..200 {
        capped.answered(if i % 2 == 0 { 4 * MS } else { 12 * MS });
    }
    assert_eq!(capped.current(), 20 * MS);
}

#[test]
fn a_ceiling_below_the_floor_is_the_floor() {
    let t = Timeouts::new(10 * MS, 5 * MS);
    t.answered(100 * MS);
    assert_eq!(t.current(), 10 * MS);
    assert_eq!(t.ceiling(), 10 * MS);
}

/// A store whose every round trip is 14 ms, above the floor: its calls time out
/// until their timeouts, counted as round trips, raise the timeout past 14 ms.
#[test]
fn a_store_slower_than_the_floor_is_found_through_its_timeouts() {
    let t = Timeouts::new(10 * MS, 50 * MS);
    let round_trip = 14 * MS;
    let mut timeouts = 0;
    for _ in 0..100 {
        let timeout = t.current();
        if round_trip <= timeout {
            t.answered(round_trip);
        } else {
            timeouts += 1;
            t.timed_out(timeout);
        }
    }
    assert_eq!(timeouts, 1, "the first call only");
    assert!(t.current() >= round_trip, "{:?}", t.current());
}

/// A dead store takes the timeout to the ceiling; once it answers again in a
/// millisecond, the timeout is back at the floor within a few dozen calls.
#[test]
fn it_comes_back_down_after_a_fault() {
    let t = Timeouts::new(10 * MS, 20 * MS);
    for _ in 0..50 {
        t.timed_out(t.current());
    }
    assert_eq!(t.current(), 20 * MS);
    let mut calls = 0;
    while t.current() > 10 * MS {
        t.answered(MS);
        calls += 1;
        assert!(calls <= 40, "still {:?} after {calls} answers", t.current());
    }
}

/// A deadline whose timer fires on time: no answer by then is no answer.
#[tokio::test(start_paused = true)]
async fn an_answer_after_a_deadline_kept_on_time_is_too_late() {
    let late = async {
        tokio::time::sleep(20 * MS).await;
        7
    };
    assert_eq!(
        by(Instant::now() + 10 * MS, Duration::from_secs(1), late).await,
        None
    );
    let early = async {
        tokio::time::sleep(5 * MS).await;
        7
    };
    assert_eq!(
        by(Instant::now() + 10 * MS, Duration::from_secs(1), early).await,
        Some(7)
    );
}

/// This process stalls (its only runtime thread blocked 200 ms) with a 10 ms
/// deadline pending; the answer comes a millisecond after the stall, behind a timer
/// (as a reply behind the connection's read): the deadline, fired 190 ms late, moves
/// on, and the answer counts.
#[tokio::test(flavor = "current_thread")]
async fn a_stall_of_this_process_is_not_the_stores() {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        // The stall: the runtime's one thread does not run for 200 ms.
        std::thread::sleep(200 * MS);
        tokio::spawn(async move {
            tokio::time::sleep(MS).await;
            let _ = tx.send(7);
        });
    });
    let answer = by(Instant::now() + 10 * MS, Duration::from_secs(1), rx).await;
    assert_eq!(answer.map(Result::ok), Some(Some(7)));
}
