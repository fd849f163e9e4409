//! A minute of native rules on Redis at 1,000 requests a second, Redis frozen for a
//! second in the middle: every answer outside the freeze (and the second after it) is
//! the store's, and the process's memory and open files stay flat. A call in flight
//! when Redis stopped met the freeze, whenever it was sent.

use std::time::Duration;

use spillway_reliability::soak::{self, Soak};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_at_a_thousand_a_second_falls_back_only_in_the_freeze_and_stays_flat() {
    let _turn = crate::turn().await;
    let r = soak::run(Soak {
        store: None,
        rate: 1000,
        users: 100_000,
        length: Duration::from_secs(60),
        freeze: Duration::from_secs(1),
        every: Duration::from_secs(10),
        // The test binaries run side by side: on a busy machine a call can wait past
        // the 10 ms default behind other work. A call the timeout ends is answered by
        // its rule's failure policy, the thing this test counts.
        settings: vec![("store_timeout".into(), "250ms".into())],
    })
    .await
    .unwrap();
    println!("{r}");
    let t = &r.total;
    assert!((59_000..=60_001).contains(&t.requests), "{r}");
    assert!(t.fallbacks > 0 && t.opened >= 1, "the freeze was felt: {r}");
    assert_eq!(r.fallbacks_outside_freeze, 0, "{r}");
    // Flat: from the second row (warmed up) to the last.
    let (warm, last) = (&r.rows[1], r.rows.last().unwrap());
    assert!(last.heap_kib <= warm.heap_kib + 4 * 1024, "heap: {r}");
    assert!(last.rss_kib <= warm.rss_kib + 16 * 1024, "RSS: {r}");
    assert!(last.fds <= warm.fds + 32, "open files: {r}");
}
