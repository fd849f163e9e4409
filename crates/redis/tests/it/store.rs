//! RedisStore behaviour against real servers: Redis TIME, TTLs, functions or scripts,
//! NOSCRIPT, timeouts, Cluster slots, and input the script must refuse.

use crate::support;

use support::{cmd, int};

use std::time::Duration;

use redis::Value;
use spillway_core::{Algorithm, Error, Key, Limit, Rejected, Request, Store, Timestamp};
use spillway_redis::{RedisStore, SCRIPT, TimeSource, function_library};
use spillway_testkit::redis::{RedisServer, cluster_url, standalone_url, unique_prefix};

pub(crate) fn limit(a: Algorithm, n: u64, window: Duration) -> Limit {
    Limit::new(a, n, window).unwrap()
}

pub(crate) fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

/// Two app servers whose clocks disagree by decades share one sliding log when the
/// script reads Redis TIME; with their own clocks, each would get a window of its own.
#[tokio::test]
async fn server_time_makes_disagreeing_clocks_agree() {
    let url = standalone_url();
    let prefix = unique_prefix("server-time");
    let a = support::server_clock_store(&url, &prefix).await;
    let b = support::server_clock_store(&url, &prefix).await;
    let per_hour = limit(Algorithm::SlidingLog, 3, Duration::from_secs(3600));
    let k = key("shared");
    let early = Timestamp::from_secs(1_000_000_000);
    let late = Timestamp::from_secs(4_000_000_000);
    let (k, per_hour) = (&k, &per_hour);
    let one = |at| {
        let store = if at == early { &a } else { &b };
        async move {
            store
                .check_one(Request::new(k, per_hour, 1), at)
                .await
                .unwrap()
        }
    };
    assert_eq!(one(early).await.remaining, 2);
    assert_eq!(one(late).await.remaining, 1);
    assert_eq!(one(early).await.remaining, 0);
    let fourth = one(late).await;
    assert!(!fourth.allowed());
    // The window is Redis's last hour, not 2001's or 2096's.
    assert!(fourth.reset_after <= Duration::from_secs(3600));

    // With the callers' clocks, a caller an hour ahead is in the next window: a limit
    // of 3 per hour lets 6 through.
    let c = support::caller_clock_store(&url, "caller-time").await;
    let ahead = early.saturating_add(Duration::from_secs(3600));
    let mut admitted = 0;
    for at in [early, early, early, ahead, ahead, ahead, ahead] {
        admitted += c
            .check_one(Request::new(k, per_hour, 1), at)
            .await
            .unwrap()
            .allowed() as u32;
    }
    assert_eq!(admitted, 6);
}

/// A fixed window is the exception: its key names the window holding the caller's
/// `now` (so that `INCRBY` alone can charge the reference's rules), on server time too,
/// as the reference decides on its own clock. Two windows, three each.
#[tokio::test]
async fn a_fixed_window_is_the_callers_window_even_on_server_time() {
    let url = standalone_url();
    let store = support::server_clock_store(&url, &unique_prefix("fw-time")).await;
    let k = key("shared");
    let early = Timestamp::from_secs(1_000_000_000);
    let ahead = early.saturating_add(Duration::from_secs(3600));
    for rejected in [Rejected::NotCharged, Rejected::Charged] {
        let per_hour = Limit::builder(Algorithm::FixedWindow, 3, Duration::from_secs(3600))
            .build()
            .unwrap()
            .with_rejected(rejected);
        let mut admitted = 0;
        for at in [early, early, early, early, ahead, ahead, ahead, ahead] {
            let d = store
                .check_one(Request::new(&k, &per_hour, 1), at)
                .await
                .unwrap();
            admitted += d.allowed() as u32;
            // The caller's hour, to its end: 1,000,000,000 s is 46m 40s past an hour.
            assert_eq!(d.reset_after, Duration::from_secs(800), "{rejected:?}");
        }
        assert_eq!(admitted, 6, "{rejected:?}");
        store.reset(&k, &per_hour, early).await.unwrap();
        store.reset(&k, &per_hour, ahead).await.unwrap();
    }
}

/// After FUNCTION FLUSH the next decision loads the library again and succeeds; a
/// store calling the script does the same after SCRIPT FLUSH. Whether the library is
/// listed is asked of a server of the test's own: on the shared ones, a test deciding in
/// parallel loads it again between the flush and the look (seen twice in full runs), and
/// on Cluster a keyless `FUNCTION LIST` goes to a node of redis-rs's choosing.
#[tokio::test]
async fn a_flush_costs_one_reload() {
    let l = limit(Algorithm::Gcra, 10, Duration::from_secs(1));
    let k = key("{flush}:k");
    let now = Timestamp::from_secs(1_800_000_000);
    let (source, _) = function_library();
    let library = source
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("#!lua name="))
        .unwrap();
    let own = spillway_testkit::redis::RedisServer::start();
    for (name, url, own) in [
        ("standalone of its own", own.url(), true),
        ("cluster", support::targets()[1].1.clone(), false),
    ] {
        let store = support::caller_clock_store(&url, "flush").await;
        store.check_one(Request::new(&k, &l, 1), now).await.unwrap();
        let listed = |store: &RedisStore| {
            let c = cmd(&["FUNCTION", "LIST", "LIBRARYNAME", library]);
            let store = store.clone();
            async move {
                match store.query(&c).await.unwrap() {
                    Value::Array(v) => !v.is_empty(),
                    other => panic!("{other:?}"),
                }
            }
        };
        if own {
            assert!(listed(&store).await, "{name}: loaded at startup");
        }
        store.query(&cmd(&["FUNCTION", "FLUSH"])).await.unwrap();
        if own {
            assert!(!listed(&store).await, "{name}: flushed");
        }
        let second = store.check_one(Request::new(&k, &l, 1), now).await.unwrap();
        assert_eq!(
            second.remaining, 8,
            "{name}: state survived, the call went through"
        );
        if own {
            assert!(listed(&store).await, "{name}: loaded again");
        }
    }
    for (name, url) in support::targets() {
        let store = support::script_store(&url, TimeSource::Caller, &unique_prefix("flush")).await;
        let sha = redis::Script::new(SCRIPT).get_hash().to_owned();
        store.check_one(Request::new(&k, &l, 1), now).await.unwrap();
        // On Cluster, SCRIPT EXISTS asks every master (and only one ran the script):
        // there the test shows the call succeeding after the flush.
        let exists = |store: &RedisStore| {
            let c = cmd(&["SCRIPT", "EXISTS", &sha]);
            let store = store.clone();
            async move {
                match store.query(&c).await.unwrap() {
                    Value::Array(v) => v == vec![Value::Int(1)],
                    other => panic!("{other:?}"),
                }
            }
        };
        if !store.is_cluster() {
            assert!(exists(&store).await, "{name}: loaded by the first call");
        }
        store.query(&cmd(&["SCRIPT", "FLUSH"])).await.unwrap();
        if !store.is_cluster() {
            assert!(!exists(&store).await, "{name}: flushed");
        }
        let second = store.check_one(Request::new(&k, &l, 1), now).await.unwrap();
        assert_eq!(
            second.remaining, 8,
            "{name}: state survived, the call went through"
        );
        if !store.is_cluster() {
            assert!(exists(&store).await, "{name}: reloaded");
        }
    }
}

/// A frozen Redis (SIGSTOP) costs a caller the timeout, then a transient Timeout
/// error; when it thaws, decisions resume on the same store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_times_out_with_a_transient_error() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url())
        .prefix(unique_prefix("hung"))
        .timeout(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let l = limit(Algorithm::SlidingLog, 10, Duration::from_secs(60));
    let k = key("k");
    let now = Timestamp::from_secs(0);
    assert!(
        store
            .check_one(Request::new(&k, &l, 1), now)
            .await
            .unwrap()
            .allowed()
    );

    server.signal("STOP");
    let err = store
        .check_one(Request::new(&k, &l, 1), now)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Timeout(d) if d == Duration::from_millis(50)),
        "{err}"
    );
    assert!(err.is_transient());
    server.signal("CONT");

    // The frozen call may still complete inside Redis: 2 or 3 charged, never more.
    let mut after = None;
    for _ in 0..100 {
        match store.check_one(Request::new(&k, &l, 1), now).await {
            Ok(d) => {
                after = Some(d);
                break;
            }
            Err(e) => assert!(e.is_transient(), "{e}"),
        }
    }
    let after = after.expect("decisions resume after SIGCONT");
    assert!(
        after.allowed() && (6..=7).contains(&after.remaining),
        "{after:?}"
    );
}

/// On Cluster a batch must live in one slot: different identities get a clear error
/// before any Redis call; one key group makes the batch one atomic call.
#[tokio::test]
async fn cross_slot_batches_are_refused_with_advice_on_cluster() {
    let store = support::caller_clock_store(&cluster_url(), "slots").await;
    let l = limit(Algorithm::FixedWindow, 5, Duration::from_secs(60));
    let now = Timestamp::from_secs(1_800_000_000);
    let (a, b) = (key("user:1"), key("ip:10.1.2.3"));
    let err = store
        .check(&[Request::new(&a, &l, 1), Request::new(&b, &l, 1)], now)
        .await
        .unwrap_err();
    assert!(err.is_invalid_input());
    assert!(err.to_string().contains("one key group"), "{err}");
    assert_eq!(
        int(&store, &["EXISTS", &store.key_for(&a, &l, now)]).await,
        0,
        "nothing was charged"
    );

    let (a, b) = (
        Key::grouped("tenant-1", ":user:1").unwrap(),
        Key::grouped("tenant-1", ":ip:10.1.2.3").unwrap(),
    );
    let tight = limit(Algorithm::FixedWindow, 1, Duration::from_secs(60));
    let both = [Request::new(&a, &l, 1), Request::new(&b, &tight, 1)];
    assert!(store.check(&both, now).await.unwrap().allowed());
    let second = store.check(&both, now).await.unwrap();
    assert_eq!(second.denied_by, Some(1));
    assert_eq!(
        second.decisions[0].remaining, 4,
        "all or nothing across two identities"
    );

    // Standalone Redis takes any batch.
    let single = support::caller_clock_store(&standalone_url(), "slots").await;
    let (a, b) = (key("user:1"), key("ip:10.1.2.3"));
    let both = [Request::new(&a, &l, 1), Request::new(&b, &tight, 1)];
    assert!(single.check(&both, now).await.unwrap().allowed());
    assert_eq!(single.check(&both, now).await.unwrap().denied_by, Some(1));
}

/// Reset forgets a key's state for a limit's shape and nothing else.
#[tokio::test]
async fn reset_forgets_one_shape() {
    let store = support::caller_clock_store(&standalone_url(), "reset").await;
    let now = Timestamp::from_secs(1_800_000_000);
    let a = limit(Algorithm::Gcra, 2, Duration::from_secs(60));
    let b = limit(Algorithm::FixedWindow, 2, Duration::from_secs(60));
    let k = key("k");
    for l in [&a, &b] {
        store.check_one(Request::new(&k, l, 2), now).await.unwrap();
    }
    store.reset(&k, &a, now).await.unwrap();
    let after = |l| store.check_one(Request::new(&k, l, 0), now);
    assert_eq!(after(&a).await.unwrap().remaining, 2);
    assert_eq!(after(&b).await.unwrap().remaining, 0);
}

/// Construction errors say what is wrong and whether retrying can help.
#[tokio::test]
async fn bad_settings_and_unreachable_servers_are_clear_errors() {
    let err = RedisStore::connect("localhost:6379").await.unwrap_err();
    assert!(err.to_string().contains("expected a URL"), "{err}");
    assert!(!err.is_transient());

    let err = RedisStore::builder(standalone_url())
        .prefix("a{b}")
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("brace"), "{err}");

    let err = RedisStore::builder(standalone_url())
        .cluster_shards(spillway_redis::MAX_CLUSTER_SHARDS + 1)
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at most 1024"), "{err}");
    assert!(!err.is_transient());

    // A port nothing listens on: a listener bound and dropped.
    let port = spillway_testkit::port::free();
    let err = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
    assert!(err.is_transient());
}
