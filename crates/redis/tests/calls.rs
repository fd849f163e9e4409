//! Which calls a Redis store makes, counted by the servers themselves (`INFO
//! commandstats`). A file of its own: cargo runs one test binary at a time, so no other
//! test's calls land on the shared servers while these count theirs (they did, beside
//! the tests of `store.rs`).

mod support;

use std::time::Duration;

use spillway_core::{Algorithm, Key, Limit, Request, Store, Timestamp};
use spillway_redis::{Calls, RedisStore, TimeSource, function_library};
use spillway_testkit::redis::{RedisServer, unique_prefix};

fn limit(a: Algorithm, n: u64, window: Duration) -> Limit {
    Limit::new(a, n, window).unwrap()
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

/// The calls each store makes, counted by every node's `INFO commandstats`.
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
                .args(["-u", node, "INFO", "commandstats"])
                .output()
                .expect("redis-cli runs");
            String::from_utf8_lossy(&out.stdout)
                .lines()
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
