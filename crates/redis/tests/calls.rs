//! Which calls a Redis store makes, counted by the servers themselves (`INFO
//! commandstats`). A test binary of its own (the others are folded into `tests/it`):
//! `cargo test` runs one test binary at a time, and scripts/test runs this one alone,
//! after all the others, so no other test's calls land on the shared servers while
//! these count theirs (they did, beside the tests of `store.rs`).

#[path = "it/support.rs"]
mod support;

use std::time::Duration;

use spillway_core::{Algorithm, Key, Limit, Request, Store, Timestamp};
use spillway_redis::{Calls, RedisStore, TimeSource, function_library};
use spillway_testkit::redis::{RedisServer, unique_prefix};

/// The tests of this file count the servers' calls: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn limit(a: Algorithm, n: u64, window: Duration) -> Limit {
    Limit::new(a, n, window).unwrap()
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

/// The calls each store makes, counted by every master's `INFO commandstats` (a
/// replica counts the writes it replays too).
fn calls_of(url: &str, command: &str) -> u64 {
    let nodes: Vec<String> = match url.strip_prefix("redis+cluster://") {
        Some(list) => list.split(',').map(|n| format!("redis://{n}")).collect(),
        None => vec![url.to_owned()],
    };
    let field = format!("cmdstat_{command}:calls=");
    nodes
        .iter()
        .map(|node| {
            let out = std::process::Command::new("redis-cli")
                .args(["-u", node, "INFO", "everything"])
                .output()
                .expect("redis-cli runs");
            let info = String::from_utf8_lossy(&out.stdout);
            if info.lines().any(|l| l.trim() == "role:slave") {
                return 0;
            }
            info.lines()
                .find_map(|l| l.strip_prefix(&field)?.split(',').next()?.parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// Where the server has functions the store loads its library and decides with FCALL;
/// turned off, or on a server without functions (Redis before 7.0, here one whose
/// FUNCTION command is renamed away), with EVALSHA — and says which at startup.
#[tokio::test]
async fn decisions_are_fcall_where_the_server_has_functions_and_evalsha_elsewhere() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let l = limit(Algorithm::Gcra, 100, Duration::from_secs(1));
    let k = key("{choice}:k");
    let decide = |store: RedisStore| {
        let (k, l) = (k.clone(), l.clone());
        async move {
            for _ in 0..10 {
                let d =
                    store.check_one(Request::new(&k, &l, 1), Timestamp::from_secs(1_800_000_000));
                assert!(d.await.unwrap().allowed());
            }
        }
    };
    let (_, function) = function_library();
    for (name, url) in support::targets()
        .into_iter()
        .chain([("valkey", spillway_testkit::redis::valkey_url())])
    {
        let store = support::caller_clock_store(&url, "choice").await;
        assert_eq!(
            store.calls(),
            Calls::Function {
                name: function.to_owned()
            },
            "{name}"
        );
        let (fcall, evalsha) = (calls_of(&url, "fcall"), calls_of(&url, "evalsha"));
        decide(store).await;
        assert_eq!(
            calls_of(&url, "fcall") - fcall,
            10,
            "{name}: one FCALL a decision"
        );
        assert_eq!(calls_of(&url, "evalsha"), evalsha, "{name}: no EVALSHA");

        let scripts =
            support::script_store(&url, TimeSource::Caller, &unique_prefix("choice")).await;
        assert_eq!(
            scripts.calls(),
            Calls::Script {
                why: "functions turned off".into()
            },
            "{name}"
        );
        let (fcall, evalsha) = (calls_of(&url, "fcall"), calls_of(&url, "evalsha"));
        decide(scripts).await;
        assert_eq!(
            calls_of(&url, "evalsha") - evalsha,
            10,
            "{name}: one EVALSHA a decision"
        );
        assert_eq!(calls_of(&url, "fcall"), fcall, "{name}: no FCALL");
    }

    // A server without functions, as Redis 6 is.
    let old = RedisServer::start_with(&["--rename-command", "FUNCTION", ""]);
    let store = support::caller_clock_store(&old.url(), "choice").await;
    let Calls::Script { why } = store.calls() else {
        panic!("{:?}", store.calls())
    };
    assert!(why.contains("no functions"), "{why}");
    assert!(
        store.calls().to_string().starts_with("EVALSHA"),
        "{}",
        store.calls()
    );
    let evalsha = calls_of(&old.url(), "evalsha");
    decide(store).await;
    assert_eq!(calls_of(&old.url(), "evalsha") - evalsha, 10);
}

/// A batch of the reference's rules (fixed windows charging every request) is plain
/// `INCRBY`s, as the reference sends, the first on a window key with a `PEXPIRE … NX`
/// that gives it its TTL, the next ones alone: no script. A batch that mixes them with
/// other rules goes in the script, which reads and writes the same counts. On every
/// deployment.
#[tokio::test]
async fn the_references_rules_are_plain_incrby_and_share_counts_with_the_script() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let reference = Limit::builder(Algorithm::FixedWindow, 3, Duration::from_secs(60))
        .count_rejected(true)
        .build()
        .unwrap();
    let admitted_only = limit(Algorithm::FixedWindow, 3, Duration::from_secs(60));
    let gcra = limit(Algorithm::Gcra, 100, Duration::from_secs(1));
    let now = Timestamp::from_secs(1_800_000_010);
    for (name, url) in support::targets()
        .into_iter()
        .chain([("valkey", spillway_testkit::redis::valkey_url())])
    {
        let store = support::caller_clock_store(&url, "incrby").await;
        let k = key("{incrby}:tenant");
        let stats = || ["incrby", "pexpire", "fcall", "evalsha", "get"].map(|c| calls_of(&url, c));
        let before = stats();
        let mut seen = Vec::new();
        for _ in 0..5 {
            let d = store
                .check_one(Request::new(&k, &reference, 1), now)
                .await
                .unwrap();
            seen.push((d.allowed(), d.remaining));
            assert_eq!(d.reset_after, Duration::from_secs(50), "{name}");
        }
        let peek = store
            .check_one(Request::new(&k, &reference, 0), now)
            .await
            .unwrap();
        let after = stats();
        let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(
            seen,
            [(true, 2), (true, 1), (true, 0), (false, 0), (false, 0)],
            "{name}"
        );
        assert!(
            !peek.allowed() && peek.remaining == 0,
            "{name}: over, a peek too: {peek:?}"
        );
        assert_eq!(
            delta,
            [5, 1, 0, 0, 1],
            "{name}: INCRBY, PEXPIRE, FCALL, EVALSHA, GET"
        );
        let state = store.key_for(&k, &reference, now);
        assert!(state.ends_with(":fw30000000:60s"), "{name}: {state}");
        let value = store.query(redis::cmd("GET").arg(&state)).await.unwrap();
        assert_eq!(value, redis::Value::BulkString(b"5".to_vec()), "{name}");
        let ttl = store.query(redis::cmd("PTTL").arg(&state)).await.unwrap();
        assert!(
            matches!(ttl, redis::Value::Int(t) if t > 50_000 && t <= 51_000),
            "{name}: {ttl:?}"
        );

        // With another algorithm in the batch, the script decides, on the same count:
        // the reference rule denies (6 of 3), and the rule counting only admitted
        // requests reads the same key.
        let (fcall, evalsha) = (calls_of(&url, "fcall"), calls_of(&url, "evalsha"));
        let mixed = [Request::new(&k, &reference, 1), Request::new(&k, &gcra, 1)];
        let d = store.check(&mixed, now).await.unwrap();
        assert_eq!(d.denied_by, Some(0), "{name}");
        assert_eq!(
            calls_of(&url, "fcall") + calls_of(&url, "evalsha") - fcall - evalsha,
            1,
            "{name}: one script call"
        );
        let value = store.query(redis::cmd("GET").arg(&state)).await.unwrap();
        assert_eq!(value, redis::Value::BulkString(b"6".to_vec()), "{name}");
        let own = store
            .check_one(Request::new(&k, &admitted_only, 1), now)
            .await
            .unwrap();
        assert!(!own.allowed(), "{name}: {own:?}");

        // The next window is a new key, from 0.
        let next = now.saturating_add(Duration::from_secs(60));
        let d = store
            .check_one(Request::new(&k, &reference, 1), next)
            .await
            .unwrap();
        let nk = store.key_for(&k, &reference, next);
        let v = store.query(redis::cmd("GET").arg(&nk)).await.unwrap();
        assert!(d.allowed() && d.remaining == 2, "{name}: {d:?} {nk} {v:?}");
    }
}

/// A window key whose TTL this process saw set takes its `INCRBY` alone; should the key
/// be lost meanwhile (a failover to a replica that lacked it, a flush), that `INCRBY`
/// creates it again, without a TTL, and the decision sets the TTL before it answers.
/// On every deployment.
#[tokio::test]
async fn a_window_key_lost_after_its_ttl_was_set_gets_it_again() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let reference = Limit::builder(Algorithm::FixedWindow, 10, Duration::from_secs(60))
        .count_rejected(true)
        .build()
        .unwrap();
    let now = Timestamp::from_secs(1_800_000_010);
    for (name, url) in support::targets()
        .into_iter()
        .chain([("valkey", spillway_testkit::redis::valkey_url())])
    {
        let store = support::caller_clock_store(&url, "lost").await;
        let k = key("{lost}:tenant");
        let state = store.key_for(&k, &reference, now);
        let decide = || store.check_one(Request::new(&k, &reference, 2), now);
        let pttl = || async {
            match store.query(redis::cmd("PTTL").arg(&state)).await.unwrap() {
                redis::Value::Int(t) => t,
                other => panic!("{name}: PTTL answered {other:?}"),
            }
        };
        assert_eq!(decide().await.unwrap().remaining, 8, "{name}");
        assert!(pttl().await > 50_000, "{name}: the new key has its TTL");

        store.query(redis::cmd("DEL").arg(&state)).await.unwrap();
        let pexpire = calls_of(&url, "pexpire");
        let d = decide().await.unwrap();
        assert_eq!(d.remaining, 8, "{name}: counted from 0 again: {d:?}");
        assert_eq!(calls_of(&url, "pexpire") - pexpire, 1, "{name}");
        let ttl = pttl().await;
        assert!(
            ttl > 50_000 && ttl <= 51_000,
            "{name}: the TTL again: {ttl}"
        );

        // Known again: the next decision is its INCRBY alone.
        assert_eq!(decide().await.unwrap().remaining, 6, "{name}");
        assert_eq!(calls_of(&url, "pexpire") - pexpire, 1, "{name}");
    }
}

/// On Cluster, decisions of different key groups in one virtual shard share script
/// calls, as on one server: 64 decisions at once on 64 groups take a handful of calls
/// with one shard; with none (a slot per group) they take 64.
#[tokio::test]
async fn on_cluster_a_shard_batches_many_groups_in_one_call() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let url = spillway_testkit::redis::cluster_url();
    let l = limit(Algorithm::Gcra, 100, Duration::from_secs(1));
    let now = Timestamp::from_secs(1_800_000_000);
    let mut calls = Vec::new();
    for shards in [1, 0] {
        let store = RedisStore::builder(&url)
            .prefix(unique_prefix("shards"))
            .time_source(TimeSource::Caller)
            .timeout(Duration::from_secs(5))
            .cluster_shards(shards)
            .build()
            .await
            .unwrap();
        let keys: Vec<Key> = (0..64).map(|i| key(&format!("user:{i}"))).collect();
        let before = calls_of(&url, "fcall");
        let decided = futures_util::future::join_all(
            keys.iter()
                .map(|k| store.check_one(Request::new(k, &l, 1), now)),
        )
        .await;
        assert!(decided.iter().all(|d| d.as_ref().unwrap().allowed()));
        calls.push(calls_of(&url, "fcall") - before);
    }
    assert!(
        calls[0] <= 8,
        "one shard: {} calls for 64 decisions",
        calls[0]
    );
    assert_eq!(calls[1], 64, "a slot per group: a call each");
}
