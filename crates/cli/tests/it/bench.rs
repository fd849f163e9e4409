//! `spillway bench` as a process against the memory store, a real Redis, and a real
//! service over HTTP and gRPC; `--check` passing on an exact limit and failing when the
//! service is more permissive than the policy the bench holds it to.

use crate::support;

use std::process::{Command, Output};

use serde_json::Value;
use spillway_testkit::redis::standalone_url;

/// `spillway bench --json --duration 400ms ARGS` (ARGS split at spaces).
fn bench(args: &str) -> (Option<i32>, Value, Output) {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("bench")
        .args(["--json", "--duration", "400ms"])
        .args(args.split_whitespace())
        .output()
        .expect("spillway runs");
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), v, out)
}

fn assert_report(v: &Value) {
    for field in [
        "decisions_per_sec",
        "p50_us",
        "p90_us",
        "p99_us",
        "p999_us",
        "max_us",
        "admitted",
        "rejected",
        "errors",
    ] {
        assert!(v[field].is_number(), "`{field}` in {v}");
    }
    assert!(v["decisions"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["errors"], 0, "{v}");
}

#[test]
fn stores_memory_and_redis() {
    let (code, v, out) = bench("--store memory --algorithm gcra --limit 100 --window 1s");
    assert_eq!(code, Some(0), "{out:?}");
    assert_report(&v);
    assert!(
        v["cpu_us_per_decision"]["bench"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert!(v["cpu_us_per_decision"]["redis"].is_null(), "{v}");

    let redis = standalone_url();
    let (code, v, out) = bench(&format!(
        "--store {redis} --algorithm sliding_log --limit 50 --window 10s --hot --check"
    ));
    assert_eq!(code, Some(0), "{out:?}");
    assert_report(&v);
    assert_eq!(v["admitted"], 50, "exactly the limit on one fresh key: {v}");
    assert_eq!(v["check"]["ok"], true);
    // Redis's CPU and calls, from its INFO (other tests share this server: only that
    // they were read).
    assert!(
        v["cpu_us_per_decision"]["redis"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert!(v["decisions_per_redis_call"].as_f64().unwrap() > 0.0, "{v}");
    // FCALL: the store loaded its library (another test's EVALSHA may count too).
    assert!(
        v["redis_calls"].as_str().unwrap().starts_with("FCALL"),
        "{v}"
    );

    // Open loop: the schedule sends exactly rate × duration requests.
    let (code, v, out) = bench(&format!(
        "--store {redis} --algorithm gcra --limit 100 --window 1s --rate 2000 --zipf 1.1"
    ));
    assert_eq!(code, Some(0), "{out:?}");
    assert_eq!(v["decisions"], 800, "{v}");

    let (code, _, out) =
        bench("--store memory --algorithm sliding_window --limit 5 --window 1s --hot --check");
    assert_eq!(code, Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--check verifies exact algorithms"));
}

/// A distinct limit: the members come in turn, so once the limit's worth of them are
/// counted exactly those come back admitted (8 rounds of 50 members, 20 admitted: 160),
/// on the memory store and on Redis, exact and sketched.
#[test]
fn distinct_limits_with_members_in_turn() {
    let redis = standalone_url();
    for store in ["memory", redis.as_str()] {
        let (code, v, out) = bench(&format!(
            "--store {store} --algorithm distinct --limit 20 --window 1h --members 50 --hot --rate 1000"
        ));
        assert_eq!(code, Some(0), "{out:?}");
        assert_eq!(v["decisions"], 400, "{v}");
        assert_eq!(v["admitted"], 160, "{store}: {v}");
        // Sketched (above 100): 2 rounds of 200 members, 120 counted give or take the
        // count's error (the members admitted come back admitted).
        let (code, v, out) = bench(&format!(
            "--store {store} --algorithm distinct --limit 120 --window 1h --members 200 --hot --rate 1000"
        ));
        assert_eq!(code, Some(0), "{out:?}");
        let admitted = v["admitted"].as_u64().unwrap();
        assert!((228..252).contains(&admitted), "{store}: {v}");
    }
    let (code, _, out) = bench("--store memory --algorithm gcra --limit 5 --window 1s --members 9");
    assert_eq!(code, Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--members applies to"));
}

/// `--max-wait`: the admissions after a wait are counted and their waits reported, never
/// past the limit's; a limit that cannot wait is refused.
#[test]
fn waits_are_reported() {
    let redis = standalone_url();
    for store in ["memory", redis.as_str()] {
        let (code, v, out) = bench(&format!(
            "--store {store} --algorithm gcra --limit 100 --window 1s --burst 1 --max-wait 100ms --hot --rate 1000"
        ));
        assert_eq!(code, Some(0), "{out:?}");
        let waited = &v["waited"];
        let (count, admitted) = (
            waited["count"].as_u64().unwrap(),
            v["admitted"].as_u64().unwrap(),
        );
        assert!(count > 0 && count < admitted, "{store}: {v}");
        assert!(waited["max_ms"].as_f64().unwrap() <= 100.0, "{store}: {v}");
    }
    let (code, _, out) =
        bench("--store memory --algorithm fixed_window --limit 5 --window 1s --max-wait 1s");
    assert_eq!(code, Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-wait applies to"));
}

/// A concurrency limit with `--hold`: each admitted request holds its slot 40 ms, then
/// gives it back, on the memory store and on Redis, one hot key and 8 callers: the
/// most held at once is the limit, never more, and the slots turn over (400 ms of
/// 40 ms holds: about 10 rounds of 2).
#[test]
fn a_concurrency_limit_held_and_given_back() {
    let redis = standalone_url();
    for store in ["memory", redis.as_str()] {
        let (code, v, out) = bench(&format!(
            "--store {store} --algorithm concurrency --limit 2 --window 1m --hold 40ms --hot --concurrency 8"
        ));
        assert_eq!(code, Some(0), "{out:?}");
        assert_eq!(v["errors"], 0, "{store}: {v}");
        assert_eq!(v["holds"]["most_of_one_key_at_once"], 2, "{store}: {v}");
        assert_eq!(v["holds"]["hold_ms"], 40, "{v}");
        let admitted = v["admitted"].as_u64().unwrap();
        assert!(
            (8..=22).contains(&admitted),
            "{store}: {admitted} admitted: {v}"
        );
    }
    let (code, _, out) = bench("--store memory --algorithm concurrency --limit 2 --window 1m");
    assert_eq!(code, Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--hold"),
        "{out:?}"
    );
}

fn policy(limit: u32) -> String {
    format!(
        "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {{ unit: minute, requests_per_unit: {limit} }}\n"
    )
}

#[test]
fn a_running_service_over_http_and_grpc_and_a_check_that_fails() {
    let (runtime, running) = support::server("bench", &policy(100));
    let http = format!("http://{}", running.http_addr);
    let grpc = format!("grpc://{}", running.grpc_addr);
    for url in [&http, &grpc] {
        // The service runs in this test's process: its CPU is this process's.
        let (code, v, out) = bench(&format!(
            "--server {url} --domain b --key-name user --concurrency 8 --server-pid {}",
            std::process::id()
        ));
        assert_eq!(code, Some(0), "{out:?}");
        assert_report(&v);
        assert!(
            v["cpu_us_per_decision"]["server"].as_f64().unwrap() > 0.0,
            "{v}"
        );
    }

    // Held to its own policy (100 per minute) the service passes; held to a stricter one
    // than it serves (10 per minute), --check catches it.
    let dir = support::tempdir("bench-policy");
    let held_to = |url: &str, limit: u32| {
        let file = dir.join(format!("{limit}.yaml"));
        std::fs::write(&file, policy(limit)).unwrap();
        let file = file.to_str().unwrap();
        bench(&format!(
            "--server {url} --config {file} --domain b --key-name user --hot --check"
        ))
    };
    let (code, v, out) = held_to(&grpc, 100);
    assert_eq!(code, Some(0), "{out:?}");
    assert_eq!(v["check"]["ok"], true, "{v}");
    assert!(v["admitted"].as_u64().unwrap() <= 200, "{v}");

    let (code, v, out) = held_to(&http, 10);
    assert_eq!(code, Some(1), "{out:?}");
    assert_eq!(v["check"]["ok"], false, "{v}");
    assert!(v["admitted"].as_u64().unwrap() > v["check"]["allowed"].as_u64().unwrap());
    runtime.block_on(running.stop());
}

/// `--rlqs`: Envoy-like streams reporting buckets to a service's Rate Limit Quota
/// Service: every report is answered (one assignment a bucket at least), and the
/// service's CPU per report and per assignment is said.
#[test]
fn rlqs_streams_report_and_are_assigned() {
    let (runtime, running) = support::server("bench-rlqs", &policy(600));
    let (code, v, out) = bench(&format!(
        "--server grpc://{} --domain b --key-name user --keys 20 --rlqs 4 --report-every 50ms \
         --server-pid {}",
        running.grpc_addr,
        std::process::id()
    ));
    assert_eq!(code, Some(0), "{out:?}");
    let reports = v["reports"].as_u64().unwrap();
    assert!(reports >= 4 * 4, "{v}");
    // Each report's 20 buckets answered; the streams read to the run's end, so the
    // last reports' answers may be unread.
    assert!(
        v["assignments"].as_u64().unwrap() >= (reports - 4) * 20,
        "{v}"
    );
    // Said, with --server-pid (a run this short may use less than the 10 ms tick /proc
    // counts in: the reading itself is cpu.rs's test).
    assert!(v["server_cpu_us_per_report"].as_f64().is_some(), "{v}");
    assert!(v["server_cpu_us_per_assignment"].as_f64().is_some(), "{v}");
    runtime.block_on(running.stop());
}

/// `GET /v1/top` after a spread load and a `--hot` one: the hot key is the heaviest
/// denied key.
#[test]
fn the_hot_key_of_a_bench_run_tops_the_denied_keys() {
    let (runtime, running) = support::server("bench-top", &policy(5));
    let http = format!("http://{}", running.http_addr);
    let (code, _, out) = bench(&format!(
        "--server {http} --domain b --key-name user --keys 20 --concurrency 4"
    ));
    assert_eq!(code, Some(0), "{out:?}");
    let (code, _, out) = bench(&format!(
        "--server {http} --domain b --key-name user --hot --hot-key the-hot-one --concurrency 4"
    ));
    assert_eq!(code, Some(0), "{out:?}");
    let top: Value = runtime.block_on(async {
        reqwest::get(format!(
            "http://{}/v1/top?domain=b",
            running.admin_addr.unwrap()
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
    });
    let first = &top["rules"][0]["keys"][0];
    assert!(
        first["key"].as_str().unwrap().contains("the-hot-one"),
        "{top}"
    );
    let second = top["rules"][0]["keys"][1]["denied"].as_u64().unwrap();
    assert!(first["denied"].as_u64().unwrap() > second, "{top}");
}
