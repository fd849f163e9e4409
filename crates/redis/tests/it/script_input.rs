//! The decision script's own checks, called by hand: numbers it must not compute with
//! and state it cannot read are refused per batch, the other batches of the call
//! decided as if alone.

use crate::support;

use support::{cmd, int};

use redis::Value;
use spillway_redis::{RedisStore, SCRIPT};
use spillway_testkit::redis::standalone_url;

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
        "10 0 10 1000000 1 100000 100000 1000000",
        // A concurrency hold needs an id (the member, empty here).
        "9 0 3 30000000 0 0 0 0",
        "6 0 10 1000000 7 0 0 0",
        // A sketched distinct limit takes its ring's keys too.
        "7 0 1000 1000000 1 0 0 0",
        "7 0 1000 61000000 61 0 0 0",
        "6 0 10 1000000 0 0 0 0",
        "5 0 0 1000000 1 100000 100000 1000000",
        "5 0 10 0 1 100000 100000 1000000",
        "5 0 10 nan 1 100000 100000 1000000",
        "5 0 10 1000000 1 100000 100000",
        "5 0 10 1000000 1 100000 100000 1000000 1 1",
        // A wait (the ninth number) on an algorithm that cannot wait.
        "1 0 10 1000000 0 0 0 0 100",
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
