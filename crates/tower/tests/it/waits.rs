//! A limit with `max_wait`: the layer reserves the slot, sleeps the wait, then calls
//! the service; past the wait, a 429 as before. On the path that decides at once (one
//! rule, the memory store) and on the one that awaits the store (two rules). Real
//! time: only lower bounds are checked.

use crate::support;

use std::time::Duration;

use spillway_core::{Algorithm, Clock, Limit, SystemClock};
use spillway_tower::{ClientIp, KeyExtractor, Mode, Rule};
use support::{builder, limit, serve_layer};

fn paced() -> Limit {
    Limit::builder(Algorithm::Gcra, 10, Duration::from_secs(1))
        .burst(1)
        .max_wait(Duration::from_millis(250))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_waits_the_turn_before_calling_the_service() {
    for rules in [1, 2] {
        let mut b = builder().limit(Rule::new(
            "paced",
            paced(),
            KeyExtractor::client_ip(ClientIp::new()),
        ));
        if rules == 2 {
            let daily = limit(Algorithm::FixedWindow, 100, Duration::from_secs(86_400));
            b = b.limit(Rule::new(
                "daily",
                daily,
                KeyExtractor::client_ip(ClientIp::new()),
            ));
        }
        let client = serve_layer(b.build().unwrap()).await;
        assert_eq!(client.status("/", &[]).await, 200);
        let started = SystemClock.now();
        assert_eq!(client.status("/", &[]).await, 200, "{rules} rules");
        let took = SystemClock.now().duration_since(started);
        assert!(
            took >= Duration::from_millis(100),
            "{rules} rules: {took:?}"
        );
        // The clock stands still: the next waits 200 ms (within 250), the one after
        // would wait 300 ms, past max_wait.
        assert_eq!(client.status("/", &[]).await, 200);
        assert_eq!(client.status("/", &[]).await, 429, "{rules} rules");
    }
}

/// In shadow mode the layer only notes what it would do: no wait. (One request per
/// 10 s, waits up to a minute: enforced, the second request would wait 10 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_layer_never_waits() {
    let slow = Limit::builder(Algorithm::Gcra, 1, Duration::from_secs(10))
        .max_wait(Duration::from_secs(60))
        .build()
        .unwrap();
    let layer = builder()
        .mode(Mode::Shadow)
        .limit(Rule::new(
            "slow",
            slow,
            KeyExtractor::client_ip(ClientIp::new()),
        ))
        .build()
        .unwrap();
    let client = serve_layer(layer).await;
    assert_eq!(client.status("/", &[]).await, 200);
    let started = SystemClock.now();
    assert_eq!(client.status("/", &[]).await, 200);
    let took = SystemClock.now().duration_since(started);
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// Fifty callers, each sending its next request once the last is answered, ten
/// requests each, against 200 a second (burst 1) with waits up to 500 ms, on the
/// system clock: none is refused (at most fifty wait at once, 250 ms at most), and the
/// 500 admissions take at least the 2.5 s the rate allows, whatever the machine's load
/// adds (the bound at the times requests go ahead is the property tests'). The handler
/// was called once per admission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_callers_over_the_rate_all_wait_their_turn_and_the_rate_holds() {
    const CALLERS: usize = 50;
    const EACH: usize = 10;
    let paced = Limit::builder(Algorithm::Gcra, 200, Duration::from_secs(1))
        .burst(1)
        .max_wait(Duration::from_millis(500))
        .build()
        .unwrap();
    let layer = spillway_tower::RateLimitLayer::builder(spillway_core::MemoryStore::new())
        .clock(SystemClock)
        .limit(Rule::new("paced", paced, KeyExtractor::header("x-tenant")))
        .build()
        .unwrap();
    let (router, calls) = support::app(layer);
    let client = support::serve(router).await;
    let started = SystemClock.now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut refused = 0;
                for _ in 0..EACH {
                    if client.status("/", &[("x-tenant", "t")]).await != 200 {
                        refused += 1;
                    }
                }
                refused
            })
        })
        .collect();
    let mut refused = 0;
    for c in callers {
        refused += c.await.unwrap();
    }
    let took = SystemClock.now().duration_since(started);
    let admitted = CALLERS * EACH;
    assert_eq!(refused, 0, "{refused} refused");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), admitted);
    // The first goes at once, each later one 5 ms after the one before.
    let fastest = Duration::from_millis(5 * (admitted as u64 - 1));
    assert!(took >= fastest, "{admitted} admitted in {took:?}");
    eprintln!("{admitted} admitted in {took:?} (at least {fastest:?} at 200 a second)");
}
