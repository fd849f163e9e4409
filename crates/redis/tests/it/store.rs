//! RedisStore behaviour against real servers: Redis TIME, TTLs, functions or scripts,
//! NOSCRIPT, timeouts, Cluster slots, and input the script must refuse.

use crate::support;

use support::{cmd, int};

use std::time::Duration;

use redis::Value;
use spillway_core::{Algorithm, Edge, Error, Key, Limit, Rejected, Request, Store, Timestamp};
use spillway_redis::{RedisStore, SCRIPT, TimeSource, function_library};
use spillway_testkit::redis::{RedisServer, cluster_url, standalone_url, unique_prefix};

fn limit(a: Algorithm, n: u64, window: Duration) -> Limit {
    Limit::new(a, n, window).unwrap()
}

fn key(k: &str) -> Key {
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

/// Every key the script writes carries a TTL, whatever wrote it: admitted and
/// rejected charges, count_rejected, peeks, shared keys in one batch, every algorithm.
#[tokio::test]
async fn every_key_written_has_a_ttl() {
    for (name, url) in support::targets() {
        let store = support::caller_clock_store(&url, "ttl").await;
        let w = Duration::from_secs(10);
        let mut limits: Vec<Limit> = Algorithm::ALL.iter().map(|a| limit(*a, 5, w)).collect();
        limits.push(limit(
            Algorithm::SlidingWindow {
                precision: 10,
                edge: Edge::Strict,
            },
            5,
            w,
        ));
        for a in Algorithm::ALL {
            limits.push(
                Limit::builder(a, 3, w)
                    .count_rejected(true)
                    .build()
                    .unwrap(),
            );
        }
        let mut now = Timestamp::from_secs(1_800_000_000);
        for round in 0..40u64 {
            let k = Key::grouped("ttl", &format!(":user:{}", round % 4)).unwrap();
            let requests: Vec<Request<'_>> = limits
                .iter()
                .enumerate()
                .map(|(i, l)| Request::new(&k, l, (round + i as u64) % 4))
                .collect();
            store.check(&requests, now).await.unwrap();
            // The same key and limit twice in one batch.
            let twice = [
                Request::new(&k, &limits[0], 1),
                Request::new(&k, &limits[0], 2),
            ];
            store.check(&twice, now).await.unwrap();
            now = now.saturating_add(Duration::from_millis(700));
        }
        let keys = scan(&store, &format!("{}*", prefix_of(&store, &limits[0]))).await;
        assert!(keys.len() >= 12, "{name}: only {} keys", keys.len());
        for k in &keys {
            let ttl = int(&store, &["PTTL", k]).await;
            assert!(ttl > 0, "{name}: {k} has PTTL {ttl}");
        }
    }
}

/// The prefix part of a store's key names (everything before the hash tag).
fn prefix_of(store: &RedisStore, l: &Limit) -> String {
    let name = store.key_for(&key("x"), l, Timestamp::from_secs(0));
    name[..name.find('{').unwrap()].to_owned()
}

/// SCAN over every master (on Cluster, `SCAN` is routed to one node per call, so walk
/// the keys by their known names instead when clustered).
async fn scan(store: &RedisStore, pattern: &str) -> Vec<String> {
    if store.is_cluster() {
        // The test's keys are all in the key group `ttl`: one slot holds them all.
        let any = limit(Algorithm::Gcra, 1, Duration::from_secs(1));
        let probe = store.key_for(&key("ttl"), &any, Timestamp::from_secs(0));
        let mut keys = Vec::new();
        let slot = int(store, &["CLUSTER", "KEYSLOT", &probe]).await;
        let got = store
            .query(&cmd(&[
                "CLUSTER",
                "GETKEYSINSLOT",
                &slot.to_string(),
                "100000",
            ]))
            .await
            .unwrap();
        if let Value::Array(items) = got {
            for v in items {
                if let Value::BulkString(b) = v {
                    let k = String::from_utf8(b).unwrap();
                    if k.starts_with(&pattern[..pattern.len() - 1]) {
                        keys.push(k);
                    }
                }
            }
        }
        return keys;
    }
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let got = store
            .query(&cmd(&["SCAN", &cursor, "MATCH", pattern, "COUNT", "1000"]))
            .await
            .unwrap();
        let Value::Array(parts) = got else { panic!() };
        let [Value::BulkString(next), Value::Array(items)] = &parts[..] else {
            panic!("{parts:?}")
        };
        for v in items {
            if let Value::BulkString(b) = v {
                keys.push(String::from_utf8(b.clone()).unwrap());
            }
        }
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            return keys;
        }
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

/// One request of a hand-made script call: key, now, limit text, cost.
type Raw<'a> = (&'a str, &'a str, &'a str, &'a str);

/// One script call of `batches` (one request each), as the store sends it.
fn eval(batches: &[Raw<'_>]) -> redis::Cmd {
    let mut c = redis::cmd("EVAL");
    c.arg(SCRIPT).arg(batches.len());
    for (k, ..) in batches {
        c.arg(*k);
    }
    c.arg(batches.len());
    for (_, now, limit, cost) in batches {
        c.arg(1).arg(1).arg(*now).arg(*limit).arg(*cost).arg("");
    }
    c
}

/// The script's reply to `batches`: per batch, its decisions or why it failed. The
/// reply is flat: a batch's `denied_by` and its request's four integers, or a string.
async fn parts(store: &RedisStore, batches: &[Raw<'_>]) -> Vec<Value> {
    let Value::Array(items) = store.query(&eval(batches)).await.unwrap() else {
        panic!("expected an array")
    };
    let mut items = items.into_iter();
    let mut parts = Vec::new();
    while let Some(first) = items.next() {
        match first {
            why @ Value::BulkString(_) => parts.push(why),
            denied_by => {
                let mut part = vec![denied_by];
                part.extend(items.by_ref().take(4));
                parts.push(Value::Array(part));
            }
        }
    }
    assert_eq!(parts.len(), batches.len(), "one reply per batch: {parts:?}");
    parts
}

fn failure(part: &Value) -> String {
    match part {
        Value::BulkString(why) => String::from_utf8_lossy(why).into_owned(),
        other => panic!("expected the batch to fail, got {other:?}"),
    }
}

/// The script refuses numbers it must not compute with — NaN, infinities, negatives,
/// fractions, hex, values past 2^53 — and a stored value it cannot read, and writes
/// nothing for the batch that has them; the other batches of the same call are
/// decided and written as if they had come alone. A header that does not add up
/// fails the whole call.
#[tokio::test]
async fn the_script_refuses_bad_numbers_and_foreign_state() {
    let store = support::caller_clock_store(&standalone_url(), "refuse").await;
    let (k, other) = ("refuse:{k}", "refuse:{other}");
    const NOW: &str = "1800000000000000";
    // A valid GCRA limit: alg 5, no count_rejected, burst 10, 1 s window, rate 1,
    // unit 100000, e(1) 100000, tau 1000000.
    const GCRA: &str = "5 0 10 1000000 1 100000 100000 1000000";
    let good: Raw<'_> = (other, NOW, GCRA, "1");
    let reply = parts(&store, &[good]).await;
    assert!(matches!(reply[..], [Value::Array(_)]), "{reply:?}");
    store.query(&cmd(&["DEL", other])).await.unwrap();

    let bad_costs = [
        "nan",
        "inf",
        "-1",
        "1.5",
        "1e3",
        "0x10",
        " 1",
        "9007199254740993",
    ];
    let bad_limits = [
        "9 0 10 1000000 1 100000 100000 1000000",
        "6 0 10 1000000 7 0 0 0",
        // A sketched distinct limit takes its ring's keys too.
        "7 0 1000 1000000 1 0 0 0",
        "7 0 1000 61000000 61 0 0 0",
        "6 0 10 1000000 0 0 0 0",
        "5 0 0 1000000 1 100000 100000 1000000",
        "5 0 10 0 1 100000 100000 1000000",
        "5 0 10 nan 1 100000 100000 1000000",
        "5 0 10 1000000 1 100000 100000",
        "5 0 10 1000000 1 100000 100000 1000000 1",
        "5 0 10 1e6 1 100000 100000 1000000",
        "5 0 10 -1000000 1 100000 100000 1000000",
        "5 0 10 9007199254740993 1 100000 100000 1000000",
        "5  0 10 1000000 1 100000 100000 1000000",
    ];
    let cases = bad_costs
        .iter()
        .map(|c| (GCRA, *c))
        .chain(bad_limits.iter().map(|l| (*l, "1")));
    for (limit, cost) in cases {
        let reply = parts(&store, &[(k, NOW, limit, cost), good]).await;
        assert!(
            failure(&reply[0]).contains("spillway"),
            "{limit}/{cost}: {reply:?}"
        );
        let Value::Array(decided) = &reply[1] else {
            panic!("{limit}/{cost}: the good batch was not decided: {reply:?}")
        };
        assert_eq!(
            decided[0],
            Value::Int(0),
            "{limit}/{cost}: the good batch is admitted"
        );
        let Value::BulkString(tat) = store.query(&cmd(&["GET", other])).await.unwrap() else {
            panic!("{limit}/{cost}: the good batch wrote nothing")
        };
        assert_eq!(tat, b"1800000000100000", "{limit}/{cost}: charged once");
        store.query(&cmd(&["DEL", other])).await.unwrap();
    }
    for bad_now in ["nan", "-5", ""] {
        let reply = parts(&store, &[(k, bad_now, GCRA, "1")]).await;
        assert!(
            failure(&reply[0]).contains("ARGV[4]"),
            "{bad_now:?}: {reply:?}"
        );
    }
    assert_eq!(int(&store, &["EXISTS", k]).await, 0, "nothing written");

    // A header that does not add up: no batch runs.
    for bad in [
        vec!["0"],
        vec!["2", "1", "1", NOW],
        vec!["1", "2", "2", NOW],
        vec!["x", "1", "1", NOW],
        vec!["1", "1", "2", NOW],
        vec!["1", "1", "0", NOW],
    ] {
        let mut c = redis::cmd("EVAL");
        c.arg(SCRIPT)
            .arg(1)
            .arg(k)
            .arg(&bad[..])
            .arg(GCRA)
            .arg(1)
            .arg("");
        let err = store.query(&c).await.unwrap_err();
        assert!(err.to_string().contains("spillway"), "{bad:?}: {err}");
        assert!(!err.is_transient(), "{bad:?}: not worth retrying");
    }
    assert_eq!(int(&store, &["EXISTS", k]).await, 0, "nothing written");

    // A value the algorithm cannot read fails its batch and stays as it was.
    store
        .query(&cmd(&["SET", k, "not a timestamp"]))
        .await
        .unwrap();
    let reply = parts(&store, &[(k, NOW, GCRA, "1"), good]).await;
    let why = failure(&reply[0]);
    assert!(why.contains("not state of its algorithm"), "{why}");
    assert!(matches!(reply[1], Value::Array(_)), "{reply:?}");
    let Value::BulkString(kept) = store.query(&cmd(&["GET", k])).await.unwrap() else {
        panic!()
    };
    assert_eq!(kept, b"not a timestamp");
    store.query(&cmd(&["DEL", k, other])).await.unwrap();

    // A key of another type, read ahead by the call's MGET (which sees it as missing):
    // the batch fails and the key is left as it was, in a call of several batches as
    // alone.
    store.query(&cmd(&["HSET", k, "field", "v"])).await.unwrap();
    for batches in [&[(k, NOW, GCRA, "1"), good][..], &[(k, NOW, GCRA, "1")][..]] {
        let reply = parts(&store, batches).await;
        let why = failure(&reply[0]);
        assert!(
            why.contains("not state of its algorithm") || why.contains("WRONGTYPE"),
            "{why}"
        );
        let Value::SimpleString(kind) = store.query(&cmd(&["TYPE", k])).await.unwrap() else {
            panic!()
        };
        assert_eq!(kind, "hash");
        assert_eq!(int(&store, &["HLEN", k]).await, 1);
    }
    store.query(&cmd(&["DEL", k, other])).await.unwrap();
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
    assert!(err.is_transient());
}
