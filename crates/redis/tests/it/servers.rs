//! Which servers Spillway runs on: each store reads its server's version once at
//! connection (`INFO server`); a Redis older than 6.2 is refused saying what it lacks;
//! on the oldest supported, Redis 6.2, reservations keep and take their records.

use crate::support;

use std::time::Duration;

use spillway_core::{Algorithm, Keep, Limit, Records, Request, Timestamp};
use spillway_redis::{Calls, MIN_REDIS, RedisStore, Version};
use spillway_testkit::liar::{Liar, Lie};

#[tokio::test]
async fn every_server_says_its_version_and_none_is_older_than_the_floor() {
    for (name, url) in support::topologies() {
        let store = support::caller_clock_store(&url, "version").await;
        let server = store
            .server()
            .unwrap_or_else(|| panic!("{name}: no version"));
        assert!(server.redis_version >= MIN_REDIS, "{name}: {server}");
        let expected = match name {
            "valkey" | "valkey cluster" => "valkey",
            _ => "redis",
        };
        assert_eq!(server.name, expected, "{name}: {server}");
        println!("{name}: {server}, {}", store.calls());
        if name == support::oldest().0 {
            let minor = (server.version.0, server.version.1);
            assert_eq!(minor, (6, 2), "{name}: {server}");
            // No functions there: every call is the script.
            assert!(
                matches!(store.calls(), Calls::Script { ref why } if why.contains("before 7.0")),
                "{name}: {}",
                store.calls()
            );
        }
    }
}

#[tokio::test]
async fn a_redis_older_than_6_2_is_refused_saying_what_it_lacks() {
    for old in ["6.0.16", "5.0.14"] {
        let liar = Liar::start_as(Lie::Nil, Some(old)).await;
        let e = RedisStore::builder(liar.url()).build().await.unwrap_err();
        let said = e.to_string();
        assert!(
            said.contains(&format!("is too old: it is redis {old}"))
                && said.contains("needs Redis 6.2 or later")
                && said.contains("GETDEL"),
            "{said}"
        );
        assert!(!e.is_transient(), "waiting will not make it newer: {said}");
    }
    // The floor itself, and a server that will not say: both connect.
    let liar = Liar::start_as(Lie::Nil, Some("6.2.0")).await;
    let store = RedisStore::builder(liar.url()).build().await.unwrap();
    assert_eq!(store.server().unwrap().redis_version, Version(6, 2, 0));
    let hidden = Liar::start(Lie::Nil).await;
    let store = RedisStore::builder(hidden.url()).build().await.unwrap();
    assert_eq!(store.server(), None);
}

/// A reservation's record kept with its charge, taken once (`GETDEL`), and given back:
/// on the oldest supported Redis as on the shared servers.
#[tokio::test]
async fn records_are_kept_taken_once_and_given_back_down_to_redis_6_2() {
    let limit = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(60)).unwrap();
    let key = spillway_core::Key::new("records").unwrap();
    let now = Timestamp::from_secs(1_800_000_000);
    for (name, url) in support::targets().into_iter().chain([support::oldest()]) {
        let store = support::caller_clock_store(&url, "records").await;
        let id = format!("r{}", std::process::id());
        let keep = Keep {
            id: &id,
            record: b"estimate 3",
            ttl: Duration::from_secs(60),
        };
        let (batch, handle) = store
            .check_keeping(&[Request::new(&key, &limit, 3)], now, keep)
            .await
            .unwrap();
        assert!(batch.allowed(), "{name}");
        let handle = handle.unwrap_or_else(|| panic!("{name}: no handle"));
        let taken = store.take(&handle, now).await.unwrap();
        assert_eq!(taken.as_deref(), Some(&b"estimate 3"[..]), "{name}");
        assert_eq!(
            store.take(&handle, now).await.unwrap(),
            None,
            "{name}: taken twice"
        );
        store
            .put(&handle, b"again", Duration::from_secs(60), now)
            .await
            .unwrap();
        let again = store.take(&handle, now).await.unwrap();
        assert_eq!(again.as_deref(), Some(&b"again"[..]), "{name}");
    }
}
