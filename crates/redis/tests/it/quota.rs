//! RLQS shares kept in Redis (`scripts/quota.lua`): which shares live is decided by
//! Redis's clock, so replicas whose clocks differ agree; a holder whose Envoy came back
//! takes over its broken stream's share; a holder left nothing of its fair share is
//! withheld (booked with none), not granted a share of 0.

use crate::support;

use std::time::Duration;

use spillway_core::{Clock, SystemClock};
use spillway_redis::quota::Ask;
use spillway_redis::{RedisStore, TimeSource};
use spillway_testkit::redis::{standalone_url, unique_prefix};

const RATE: f64 = 10.0;
const TTL: Duration = Duration::from_secs(15);

fn ask<'a>(holder: &'a str, now: u64, replaces: Option<&'a str>) -> Ask<'a> {
    Ask {
        holder,
        demand: 100.0,
        rate: RATE,
        now,
        ttl: TTL.as_micros() as u64,
        floor: 0.1,
        headroom: 0,
        replaces,
    }
}

async fn store(prefix: &str, time: TimeSource) -> RedisStore {
    support::builder(&standalone_url())
        .prefix(prefix)
        .time_source(time)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

/// Two replicas 30 s apart (twice the TTL): on Redis's clock (the default), the one
/// ahead still sees the other's share live, and the two add up to the rate. On the
/// callers' clocks the one ahead took the other's share for lapsed and granted itself
/// the whole rate: 2× the rate (the fault this guards against, shown on purpose).
#[tokio::test]
async fn which_shares_live_is_redis_clock_not_the_replicas() {
    let now = SystemClock.now().as_micros();
    let ahead = now + 30_000_000;
    for (time, over) in [(TimeSource::Server, false), (TimeSource::Caller, true)] {
        let prefix = unique_prefix("quota-clock");
        let s = store(&prefix, time).await;
        let key = s.quota_key("q", &[("tenant".into(), "a".into())]);
        let a = s.grant_share(&key, ask("r1:1", now, None)).await.unwrap();
        let b = s.grant_share(&key, ask("r2:1", ahead, None)).await.unwrap();
        assert_eq!(a.share, RATE, "{time:?}: alone");
        let total = a.share + b.share;
        assert_eq!(total > RATE, over, "{time:?}: {a:?} {b:?}");
        if !over {
            // Left nothing of a fair half: withheld, not a share of 0 to send.
            assert!(b.withheld && b.share == 0.0, "{b:?}");
        }
    }
}

/// A holder that replaces another (the same Envoy, back on a new stream) has its live
/// share at once, and the replaced one is gone; without `replaces` the newcomer is left
/// nothing and withheld.
#[tokio::test]
async fn a_holder_takes_over_the_share_of_the_one_it_replaces() {
    let s = store(&unique_prefix("quota-replace"), TimeSource::Server).await;
    let key = s.quota_key("q", &[("tenant".into(), "b".into())]);
    let now = SystemClock.now().as_micros();
    let first = s.grant_share(&key, ask("r1:1", now, None)).await.unwrap();
    assert_eq!(first.share, RATE);
    let stranger = s.grant_share(&key, ask("r1:3", now, None)).await.unwrap();
    assert!(stranger.withheld && stranger.share == 0.0, "{stranger:?}");
    let back = s
        .grant_share(&key, ask("r1:2", now, Some("r1:1")))
        .await
        .unwrap();
    assert!(!back.withheld, "{back:?}");
    assert!(back.share > 0.0 && back.assigned <= RATE, "{back:?}");
    let held = s.shares_held(&key, now).await.unwrap();
    let names: Vec<&str> = held.iter().map(|h| h.holder.as_str()).collect();
    assert!(!names.contains(&"r1:1"), "replaced: {names:?}");
}
