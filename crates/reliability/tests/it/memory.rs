//! An IP-keyed flood on the memory store: a million distinct keys through a store
//! bounded at 100,000 keys. It never holds more than its bound, and evicting keeps
//! working (the newest keys are still decided, and charged).

use std::time::Duration;

use spillway_core::{Algorithm, Key, Limit, MemoryStore, Request, Timestamp};

#[test]
fn a_million_distinct_keys_stay_within_the_bound() {
    let _turn = crate::turn_blocking();
    const BOUND: usize = 100_000;
    let store = MemoryStore::builder().max_keys(BOUND).build();
    let limit = Limit::new(Algorithm::SlidingLog, 10, Duration::from_secs(60)).unwrap();
    let now = Timestamp::from_secs(1_700_000_000);
    let mut most = 0;
    for i in 0..1_000_000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
        let key = Key::new(ip.to_string()).unwrap();
        let d = store
            .decide_one(Request::new(&key, &limit, 1), now)
            .unwrap();
        assert!(d.allowed());
        if i % 10_000 == 0 {
            most = most.max(store.len());
        }
    }
    most = most.max(store.len());
    assert!(
        most <= store.max_keys(),
        "{most} keys held, bound {}",
        store.max_keys()
    );
    assert!(
        store.len() > BOUND / 2,
        "a full store stays near its bound: {}",
        store.len()
    );

    // The newest key is still there, charged once.
    let last = Key::new(std::net::Ipv4Addr::from(0x0a00_0000 + 999_999).to_string()).unwrap();
    let peek = store
        .decide_one(Request::new(&last, &limit, 0), now)
        .unwrap();
    assert_eq!(peek.remaining, 9);
    println!("held at most {most} keys of a {} bound", store.max_keys());
}
