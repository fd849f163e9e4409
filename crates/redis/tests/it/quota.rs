//! RLQS shares kept in Redis (`scripts/fair_share.lua`): the twin of core's
//! `fair_share` (the same grants on both give the same answers), which shares live is
//! decided by Redis's clock (replicas whose clocks differ agree), and a report's
//! buckets go in few calls, on every slot of a Cluster.

use crate::support;

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use spillway_core::fair_share::{self, Ask, Shares};
use spillway_core::{Clock, SystemClock, Timestamp};
use spillway_redis::{RedisStore, TimeSource};
use spillway_testkit::redis::{standalone_url, unique_prefix};

const RATE: f64 = 10.0;
const TTL: Duration = Duration::from_secs(17);

fn ask<'a>(holder: &'a str, replaces: Option<&'a str>) -> Ask<'a> {
    Ask {
        holder,
        demand: 100.0,
        rate: RATE,
        ttl: TTL,
        floor: fair_share::FLOOR,
        headroom: 0,
        replaces,
        running: 0.0,
    }
}

async fn store(prefix: &str, time: TimeSource) -> RedisStore {
    let builder = support::builder(&standalone_url())
        .prefix(prefix)
        .time_source(time);
    builder
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

async fn grant_one(s: &RedisStore, key: &str, ask: Ask<'_>, now: Timestamp) -> fair_share::Granted {
    let (granted, error) = s.grant_shares(now, &[(key.to_owned(), ask)]).await;
    assert!(error.is_none(), "{error:?}");
    granted[0].expect("granted")
}

/// Two replicas 30 s apart (twice the TTL): on Redis's clock (the default), the one
/// ahead still sees the other's share live, and the two add up to the rate. On the
/// callers' clocks the one ahead took the other's share for lapsed and granted itself
/// the whole rate: 2× the rate (the fault this guards against, shown on purpose).
#[tokio::test]
async fn which_shares_live_is_redis_clock_not_the_replicas() {
    let now = SystemClock.now();
    let ahead = now.saturating_add(Duration::from_secs(30));
    for (time, over) in [(TimeSource::Server, false), (TimeSource::Caller, true)] {
        let s = store(&unique_prefix("quota-clock"), time).await;
        let key = s.quota_key("q", &[("tenant".into(), "a".into())]);
        let a = grant_one(&s, &key, ask("r1:1", None), now).await;
        let b = grant_one(&s, &key, ask("r2:1", None), ahead).await;
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
    let now = SystemClock.now();
    let first = grant_one(&s, &key, ask("r1:1", None), now).await;
    assert_eq!(first.share, RATE);
    let stranger = grant_one(&s, &key, ask("r1:3", None), now).await;
    assert!(stranger.withheld && stranger.share == 0.0, "{stranger:?}");
    let back = grant_one(&s, &key, ask("r1:2", Some("r1:1")), now).await;
    assert!(!back.withheld, "{back:?}");
    assert!(back.share > 0.0 && back.assigned <= RATE, "{back:?}");
    let held = s.shares_held(&key, now).await.unwrap();
    let names: Vec<&str> = held.iter().map(|h| h.holder.as_str()).collect();
    assert!(!names.contains(&"r1:1"), "replaced: {names:?}");
}

/// Lua's `fair` is core's, on any demands: the twins agree within rounding.
#[tokio::test]
async fn lua_fair_shares_are_the_rust_ones() {
    let redis = RedisStore::connect(&standalone_url()).await.unwrap();
    let demands = prop::collection::vec(
        prop_oneof![Just(0.0), 0.0..5.0f64, 0.0..100.0f64, 0.0..1e6f64],
        0..12,
    );
    let cases = (prop_oneof![Just(0.0), 0.01..10_000.0f64], demands);
    // Sampled, each case a Redis call (a failure says its case; no shrinking).
    let mut runner = TestRunner::new(Config::default());
    for _ in 0..300 {
        let (rate, demands) = cases.new_tree(&mut runner).unwrap().current();
        let lua = (redis.fair_shares(rate, fair_share::FLOOR, &demands).await).unwrap();
        let rust = fair_share::fair(rate, fair_share::FLOOR, &demands, 0);
        assert_eq!(lua.len(), rust.len());
        for (l, r) in lua.iter().zip(&rust) {
            assert!(
                (l - r).abs() <= 1e-9 * rate.max(1.0),
                "rate {rate}, demands {demands:?}: Lua {lua:?}, Rust {rust:?}"
            );
        }
    }
}

/// The same grants and settles — holders coming and going, demands, lapses,
/// replacements, what each Envoy runs, a rate lowered — on core's `Shares` and on the
/// script: the same answers, grant by grant, and the same live bookings after each step.
#[tokio::test]
async fn lua_grants_are_the_rust_ones() {
    let step = (
        0usize..4,
        0.0..40.0f64,
        0u64..12,
        0u8..7,
        prop_oneof![Just(10.0), Just(4.0)],
    );
    let steps = prop::collection::vec(step, 1..40);
    let mut runner = TestRunner::new(Config::default());
    let names = ["r:1", "r:2", "r:3", "r:4"];
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(1.0);
    for case in 0..40 {
        let s = store(&unique_prefix("quota-twins"), TimeSource::Caller).await;
        let key = s.quota_key("q", &[("case".into(), case.to_string())]);
        let mut rust = Shares::default();
        let mut now = SystemClock.now();
        for (who, demand, wait, how, rate) in steps.new_tree(&mut runner).unwrap().current() {
            now = now.saturating_add(Duration::from_secs(wait * 2));
            if how >= 5 {
                // Its Envoy took an answer and runs a share.
                let runs = demand / 4.0;
                rust.settle(names[who], runs, now);
                let settles = [(key.clone(), runs)];
                s.settle_shares(now, names[who], &settles).await.unwrap();
            } else {
                let a = Ask {
                    demand,
                    rate,
                    headroom: u32::from(how == 1),
                    replaces: (how == 2).then(|| names[(who + 1) % 4]),
                    running: if how == 3 { demand / 4.0 } else { 0.0 },
                    ..ask(names[who], None)
                };
                let want = rust.grant(&a, now);
                let got = grant_one(&s, &key, a, now).await;
                assert!(
                    close(got.share, want.share)
                        && close(got.assigned, want.assigned)
                        && got.holders == want.holders
                        && got.withheld == want.withheld,
                    "case {case}: {a:?} at {now}: Lua {got:?}, Rust {want:?}"
                );
            }
            let lua = s.shares_held(&key, now).await.unwrap();
            let want = rust.live(now);
            let same = lua.len() == want.len()
                && (lua.iter().zip(&want))
                    .all(|(l, r)| l.holder == r.holder && close(l.share, r.share));
            assert!(same, "case {case} at {now}: Lua {lua:?}, Rust {want:?}");
        }
    }
}

/// A report of 1,000 buckets is granted in calls of at most `BUCKETS_A_CALL` (a
/// server of its own counts them), every bucket answered; on a Cluster, whose buckets
/// are in many slots, too.
#[tokio::test]
async fn a_thousand_buckets_are_granted_in_a_few_calls() {
    let own = spillway_testkit::redis::RedisServer::start();
    for url in [own.url(), spillway_testkit::redis::cluster_url()] {
        let s = store_at(&url, &unique_prefix("quota-many")).await;
        let keys: Vec<String> = (0..1000)
            .map(|i| s.quota_key("q", &[("user".into(), i.to_string())]))
            .collect();
        let asks: Vec<(String, Ask<'_>)> =
            keys.iter().map(|k| (k.clone(), ask("r:1", None))).collect();
        let before = own.script_calls();
        let (granted, error) = s.grant_shares(SystemClock.now(), &asks).await;
        assert!(error.is_none(), "{url}: {error:?}");
        assert!(
            granted.iter().all(|g| g.is_some_and(|g| g.share == RATE)),
            "{url}"
        );
        if url == own.url() {
            let calls = own.script_calls() - before;
            let most = 1000_u64.div_ceil(spillway_redis::quota::BUCKETS_A_CALL as u64);
            // (and the NOSCRIPT misses of the first calls, sent together)
            let misses = spillway_redis::quota::CALLS_AT_ONCE as u64;
            assert!(calls <= most + misses, "{calls} calls for 1,000 buckets");
        }
    }
}

async fn store_at(url: &str, prefix: &str) -> RedisStore {
    support::builder(url)
        .prefix(prefix)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}
