//! `spillway check`, run as a real process against the memory store and real Redis
//! (standalone and Cluster): decisions, exit statuses, JSON, and one-line errors.

use std::process::{Command, Output};

use serde_json::Value;
use spillway_testkit::redis::{cluster_url, standalone_url, unique_prefix};

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("check")
        .args(args)
        .env_remove("SPILLWAY_STORE")
        .output()
        .expect("spillway runs")
}

fn json(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = spillway(&all);
    let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), value)
}

#[test]
fn the_memory_store_decides_in_one_process() {
    let (code, v) = json(&[
        "--algorithm",
        "gcra",
        "--limit",
        "10",
        "--window",
        "1m",
        "k",
    ]);
    assert_eq!(code, 0);
    assert_eq!(v["allowed"], true);
    assert_eq!(v["limit"], 10);
    assert_eq!(v["remaining"], 9);
    assert_eq!(v["reset_after_ms"], 6000);
    assert_eq!(v["retry_after_ms"], Value::Null);
}

#[test]
fn redis_counts_across_invocations_and_exit_status_follows_the_decision() {
    for url in [standalone_url(), cluster_url()] {
        let prefix = unique_prefix("cli");
        let args = |extra: &[&'static str]| {
            let mut a: Vec<String> = ["--store", &url, "--prefix", &prefix]
                .iter()
                .map(|s| s.to_string())
                .collect();
            a.extend(
                [
                    "--algorithm",
                    "sliding_log",
                    "--limit",
                    "3",
                    "--window",
                    "1h",
                ]
                .iter()
                .map(|s| s.to_string()),
            );
            a.extend(extra.iter().map(|s| s.to_string()));
            a.push("user:42".into());
            a
        };
        let run = |extra: &[&'static str]| {
            let a = args(extra);
            json(&a.iter().map(String::as_str).collect::<Vec<_>>())
        };
        assert_eq!(run(&["--cost", "2"]).1["remaining"], 1, "{url}");
        let (code, peek) = run(&["--peek"]);
        assert_eq!(
            (code, &peek["remaining"], &peek["cost"]),
            (0, &1.into(), &0.into())
        );
        let (code, denied) = run(&["--cost", "2"]);
        assert_eq!(code, 1, "{url}: denied exits 1");
        assert_eq!(denied["allowed"], false);
        assert_eq!(denied["outcome"], "denied");
        let retry = denied["retry_after_ms"].as_u64().expect("a retry time");
        assert!(retry > 3_500_000 && retry <= 3_600_000, "{retry}");
        let (code, never) = run(&["--cost", "4"]);
        assert_eq!(
            (code, never["outcome"].as_str()),
            (1, Some("cost_exceeds_capacity"))
        );
        assert_eq!(never["retry_after_ms"], Value::Null);
        assert_eq!(run(&["--reset"]).0, 0);
        assert_eq!(
            run(&["--peek"]).1["remaining"],
            3,
            "{url}: reset forgot the state"
        );
    }
}

/// `--algorithm distinct --member M`: three members admitted, a fourth denied, one
/// already counted admitted again; the Redis key has a TTL.
#[test]
fn distinct_members_per_key() {
    for url in [standalone_url(), cluster_url()] {
        let prefix = unique_prefix("cli-distinct");
        let run = |member: &str| {
            let args = [
                "--store",
                &url,
                "--prefix",
                &prefix,
                "--algorithm",
                "distinct",
                "--limit",
                "3",
                "--window",
                "1h",
                "--member",
                member,
                "api_key=k1",
            ];
            json(&args)
        };
        for m in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
            assert_eq!(run(m).0, 0, "{url}: {m}");
        }
        let (code, denied) = run("10.0.0.4");
        assert_eq!(code, 1, "{url}: a fourth member");
        assert_eq!(denied["outcome"], "denied");
        assert_eq!(run("10.0.0.1").0, 0, "{url}: a member already counted");

        let store = tokio::runtime::Runtime::new().unwrap().block_on(async {
            let store = spillway_redis::RedisStore::builder(&url)
                .prefix(&prefix)
                .timeout(std::time::Duration::from_secs(5))
                .build()
                .await
                .unwrap();
            let limit = spillway_core::Limit::new(
                spillway_core::Algorithm::DISTINCT,
                3,
                std::time::Duration::from_secs(3600),
            )
            .unwrap();
            let key = store.key_for(
                &spillway_core::Key::new("api_key=k1").unwrap(),
                &limit,
                spillway_core::Timestamp::from_secs(0),
            );
            let ttl = store.query(redis::cmd("PTTL").arg(&key)).await.unwrap();
            (key, ttl)
        });
        let (key, ttl) = store;
        assert!(
            matches!(ttl, redis::Value::Int(t) if t > 0 && t <= 3_600_000),
            "{url}: {key} has a TTL: {ttl:?}"
        );
    }
    // The memory store, and the member required.
    let (code, _) = json(&[
        "--algorithm",
        "distinct",
        "--limit",
        "1",
        "--window",
        "1m",
        "--member",
        "a",
        "k",
    ]);
    assert_eq!(code, 0);
    let out = spillway(&[
        "--algorithm",
        "distinct",
        "--limit",
        "1",
        "--window",
        "1m",
        "k",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --member"));
}

#[test]
fn errors_are_one_line_and_exit_2() {
    let dead = format!("redis://127.0.0.1:{}", spillway_testkit::port::free());
    fn with<'a>(alg: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["--algorithm", alg, "--limit", "5", "--window", "1s"];
        v.extend_from_slice(extra);
        v
    }
    let with_gcra = |extra| with("gcra", extra);
    for (args, says) in [
        (with_gcra(&["--store", &dead]), "cannot connect to Redis"),
        (
            with_gcra(&["--store", "http://x:1"]),
            "unknown scheme `http`",
        ),
        (
            with_gcra(&["--store", "redis+cluster://a:1,b"]),
            "`b` is not host:port",
        ),
        (with_gcra(&["--cost", "-1"]), "--cost"),
        (with_gcra(&["--cost", "nan"]), "--cost"),
        (with("sliding_log", &["--burst", "2"]), "--burst applies"),
        (with("sliding_window", &["--precision", "3"]), "sub-buckets"),
        (with("sliding_window", &["--edge", "loose"]), "unknown edge"),
        (with("leaky", &[]), "unknown algorithm"),
    ] {
        let mut all = args.clone();
        all.push("k");
        let out = spillway(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let long = "k".repeat(2000);
    let out = spillway(&[
        "--algorithm",
        "gcra",
        "--limit",
        "5",
        "--window",
        "1s",
        &long,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid key"));
}

/// `--usage N` charges N in full: exit 0 while the budget owes nothing after it, 1 once
/// it is in debt (and for every usage charged while it is), on Redis so the charges add
/// up across invocations. Over gRPC `--usage` is refused before anything is sent: the
/// protocol has no usage flag.
#[test]
fn usage_exits_0_until_the_budget_is_in_debt_and_is_refused_over_grpc() {
    let url = standalone_url();
    let prefix = unique_prefix("cli-usage");
    let usage = |units: &str| {
        let out = spillway(&[
            "--store",
            &url,
            "--prefix",
            &prefix,
            "--algorithm",
            "token_bucket",
            "--limit",
            "1000",
            "--window",
            "1h",
            "--usage",
            units,
            "tenant-u",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code().unwrap(), text)
    };
    let (code, text) = usage("700");
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("charged 700 used"), "{text}");
    let (code, text) = usage("200");
    assert_eq!(code, 0, "100 left: {text}");
    let (code, text) = usage("300");
    assert_eq!(code, 1, "200 in debt: {text}");
    assert!(text.contains("in debt"), "{text}");
    let (code, _) = usage("1");
    assert_eq!(code, 1, "deeper in debt, charged all the same");

    let out = spillway(&[
        "--server",
        "grpc://127.0.0.1:9",
        "--domain",
        "ai",
        "--usage",
        "5",
        "tenant=t1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--usage asks over HTTP"), "{stderr}");
}
