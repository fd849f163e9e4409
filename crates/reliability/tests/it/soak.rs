//! A minute of native rules on Redis at 1,000 requests a second, Redis frozen for a
//! second in the middle: every answer outside the freeze (and the second after it) is
//! the store's, and the process's memory and open files stay flat. A call in flight
//! when Redis stopped met the freeze, whenever it was sent.

use std::time::Duration;

use spillway_reliability::soak::{self, Soak};

/// A row every this long.
const EVERY: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_at_a_thousand_a_second_falls_back_only_in_the_freeze_and_stays_flat() {
    let _turn = crate::turn().await;
    let r = soak::run(Soak {
        store: None,
        rate: 1000,
        users: 100_000,
        length: Duration::from_secs(60),
        freeze: Duration::from_secs(1),
        every: EVERY,
        stall: Duration::ZERO,
        stall_every: Duration::ZERO,
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
    // Flat: the heap (counted by the allocator, exact) and the open files from the
    // second row (warmed up) to the last. Resident memory keeps what the allocator
    // kept after the freeze's few hundred waiting requests (15 MiB in a busy run, where
    // the heap came back whole): it must not grow past its level through the freeze.
    let (warm, last) = (&r.rows[1], r.rows.last().unwrap());
    assert!(last.heap_kib <= warm.heap_kib + 4 * 1024, "heap: {r}");
    assert!(last.fds <= warm.fds + 32, "open files: {r}");
    let thawed = r.freeze.unwrap().1;
    let through_freeze = (r.rows.iter())
        .take_while(|row| row.end.saturating_sub(EVERY) <= thawed)
        .map(|row| row.rss_kib)
        .max()
        .unwrap();
    assert!(last.rss_kib <= through_freeze + 4 * 1024, "RSS: {r}");
}
