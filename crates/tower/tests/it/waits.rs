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
