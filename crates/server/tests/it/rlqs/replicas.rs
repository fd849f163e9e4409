//! Envoys on replicas of one Redis: shares that add up to no more than the limit
//! through every replica, a Redis that goes and comes back, and services of other key
//! prefixes that share no bucket.

use std::sync::Arc;

use spillway_redis::{RedisStore, TimeSource};
use spillway_server::{AnyStore, Config};

use super::*;

/// A replica of a shared test Redis: its own server on the replicas' prefix and clock.
async fn replica(url: &str, prefix: &str, dir: &std::path::Path, clock: &ManualClock) -> Server {
    Server {
        running: support::start_on_redis(url, prefix, dir, clock).await,
        clock: clock.clone(),
        http: reqwest::Client::new(),
        dir: dir.to_path_buf(),
    }
}

/// Every live share of `id` through replica `s`'s eyes (on Redis, every replica's):
/// never more than the limit; the same through each replica.
async fn assigned(replicas: &[&Server], id: &BucketId) -> f64 {
    let seen: Vec<Explained> =
        futures_util::future::join_all(replicas.iter().map(|s| explain(s, id))).await;
    let total = seen[0].booked_per_second;
    for e in &seen {
        assert!(
            (e.booked_per_second - total).abs() < 1e-9,
            "the replicas agree"
        );
        let replicas: std::collections::HashSet<&str> =
            e.holders.iter().map(|h| h.replica.as_str()).collect();
        assert!(replicas.len() <= 2);
    }
    assert!(total <= 60.0 + 1e-9, "{total} assigned of 60");
    total
}

/// Envoys on two replicas of one Redis share one bucket: at every step the live shares
/// add up to at most the limit (checked through both replicas, which see the same
/// holders), each grant at most what the others leave; demand moves the shares within a
/// report of each; a newcomer on the other replica gets a share at once (the room kept
/// for one); a dropped Envoy's share goes to the others after its TTL.
#[tokio::test]
async fn replicas_share_a_bucket_through_redis() {
    let url = spillway_testkit::redis::standalone_url();
    let prefix = spillway_testkit::redis::unique_prefix("rlqs-replicas");
    let dir = support::tempdir("rlqs-replicas");
    std::fs::write(dir.join("q.yaml"), POLICY).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let (a, b) = (
        replica(&url, &prefix, &dir, &clock).await,
        replica(&url, &prefix, &dir, &clock).await,
    );
    let pairs = [("tenant", "shared")];
    let id = bucket(&pairs);

    // Alone: the whole limit but the room kept for a newcomer.
    let mut busy = Envoy::subscribe(&a).await;
    let alone = rate(&only(&busy.report(&a, vec![usage(&pairs, 200, 5)]).await));
    assert!((45.0..60.0).contains(&alone), "{alone}");
    assert!(assigned(&[&a, &b], &id).await <= 60.0);

    // A flooding Envoy on the other replica gets a share at once, from the room kept.
    let mut far = Envoy::subscribe(&b).await;
    let first = rate(&only(&far.report(&b, vec![usage(&pairs, 5_000, 5)]).await));
    assert!(first >= 1.0, "{first}");
    assert!(alone + first <= 60.0, "{alone} + {first}");
    let explained = explain(&a, &id).await;
    assert_eq!(explained.holders.len(), 2, "both replicas' holders");
    let other = explained
        .holders
        .iter()
        .find(|h| h.replica != explained.holders[0].replica);
    assert!(
        other.is_some_and(|h| h.open.is_none() && h.sent.is_none()) || {
            let h = &explained.holders[0];
            h.open.is_none() && h.sent.is_none()
        }
    );

    // Reports every 5 s: the busy one (40/s) and the flooder split the limit, the
    // flooder growing only as the busy one shrinks.
    let mut shares = (alone, first);
    for _ in 0..3 {
        clock.advance(Duration::from_secs(5));
        shares.0 = rate(&only(&busy.report(&a, vec![usage(&pairs, 200, 5)]).await));
        assert!(assigned(&[&a, &b], &id).await <= 60.0);
        shares.1 = rate(&only(&far.report(&b, vec![usage(&pairs, 5_000, 5)]).await));
        assert!(shares.0 + shares.1 <= 60.0, "{shares:?}");
        assigned(&[&a, &b], &id).await;
    }
    assert!(shares.0 >= 25.0 && shares.1 >= 25.0, "{shares:?}");

    // An idle Envoy joins on the first replica: it gets its floor.
    let mut idle = Envoy::subscribe(&a).await;
    let floor = rate(&only(&idle.report(&a, vec![usage(&pairs, 0, 5)]).await));
    assert!(floor >= 1.0, "{floor}");
    assigned(&[&a, &b], &id).await;

    // The flooder goes: its share counts until its TTL (15 s), then the others have it.
    drop(far);
    for _ in 0..4 {
        clock.advance(Duration::from_secs(5));
        shares.0 = rate(&only(&busy.report(&a, vec![usage(&pairs, 200, 5)]).await));
        idle.report(&a, vec![usage(&pairs, 0, 5)]).await;
        assigned(&[&a, &b], &id).await;
    }
    assert!(shares.0 >= 40.0, "the busy one has its demand: {shares:?}");
    assert_eq!(
        explain(&b, &id).await.holders.len(),
        2,
        "the flooder lapsed"
    );
}

/// With Redis gone, a report's rated buckets get no answer (Envoy runs its assignment
/// to its TTL, then its `expired_assignment_behavior`); the blanket rules are answered;
/// Redis back, the shares come again.
#[tokio::test]
async fn with_redis_down_rated_buckets_get_no_answer_until_it_is_back() {
    let mut redis = spillway_testkit::redis::RedisServer::start();
    let prefix = spillway_testkit::redis::unique_prefix("rlqs-down");
    let dir = support::tempdir("rlqs-down");
    std::fs::write(dir.join("q.yaml"), POLICY).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let s = replica(&redis.url(), &prefix, &dir, &clock).await;
    let mut envoy = Envoy::subscribe(&s).await;
    let pairs = [("tenant", "a")];
    let both = || vec![usage(&pairs, 10, 5), usage(&[("free", "x")], 10, 5)];
    let answer = envoy.report(&s, both()).await;
    assert_eq!(answer.bucket_action.len(), 2, "{answer:?}");

    redis.kill();
    clock.advance(Duration::from_secs(5));
    envoy.send("q", both()).await;
    let answer = envoy.next().await;
    let by = strategies(&answer);
    assert_eq!(by.len(), 1, "only the blanket rule: {answer:?}");
    assert!(by.contains_key(&sorted(&bucket(&[("free", "x")]))));
    let (status, _) = s
        .post(
            "/v1/rlqs/explain",
            &serde_json::json!({ "domain": "q", "bucket": id_map(&pairs) }),
        )
        .await;
    assert_eq!(status, 503);

    // Back: a report once the connection is up again is answered whole (each try a
    // report, as Envoy's come).
    redis.restart();
    let mut answered = false;
    for _ in 0..500 {
        clock.advance(Duration::from_secs(5));
        envoy.send("q", both()).await;
        if envoy.next().await.bucket_action.len() == 2 {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(answered, "Redis back, the rated bucket is answered again");
}

/// Two services on one Redis and store prefix, each with a `key_prefix` of its own (two
/// deployments sharing a Redis): an Envoy on each reports the same bucket, and each is
/// alone in its service's books: the same share for both, and one holder seen through
/// each (sharing the bucket, the second would have had the floor kept for a newcomer).
#[tokio::test]
async fn services_of_other_key_prefixes_share_no_bucket() {
    let url = spillway_testkit::redis::standalone_url();
    let prefix = spillway_testkit::redis::unique_prefix("rlqs-key-prefix");
    let dir = support::tempdir("rlqs-key-prefix");
    std::fs::write(dir.join("q.yaml"), POLICY).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let pairs = [("tenant", "same")];
    let mut shares = Vec::new();
    let mut envoys = Vec::new();
    for key_prefix in ["blue:", "green:"] {
        let mut config = Config::ephemeral(&dir);
        config.store.key_prefix = key_prefix.into();
        let store = RedisStore::builder(url.as_str())
            .prefix(prefix.as_str())
            .time_source(TimeSource::Caller)
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .unwrap();
        let s = Server {
            running: support::start(config, AnyStore::Redis(store), Arc::new(clock.clone()))
                .await
                .unwrap(),
            clock: clock.clone(),
            http: reqwest::Client::new(),
            dir: dir.clone(),
        };
        let mut envoy = Envoy::subscribe(&s).await;
        shares.push(rate(&only(
            &envoy.report(&s, vec![usage(&pairs, 200, 5)]).await,
        )));
        let holders = explain(&s, &bucket(&pairs)).await.holders.len();
        assert_eq!(holders, 1, "{key_prefix}: its own holder only");
        envoys.push((s, envoy));
    }
    assert_eq!(shares[0], shares[1], "{shares:?}");
}
