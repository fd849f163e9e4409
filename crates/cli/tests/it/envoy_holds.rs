//! In-flight limits behind a real Envoy (1.40): "at most 3 requests of a tenant at
//! once". The route's request-path descriptor takes a hold named by the request's id
//! (`x-request-id`, which Envoy makes when a client sends none); a second descriptor
//! with `apply_on_stream_done` and a `release` entry first gives it back when the
//! stream ends, also when the client goes away mid-response. The upstream answers
//! slowly and records how many requests of each tenant it serves at once.

use crate::support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spillway_core::{Clock, SystemClock};

use support::envoy::{envoy, example, get, spillway};
use support::{Procs, curl};

const POLICY: &str = "domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: request_id
        limits:
          - { name: in-flight, algorithm: concurrency, limit: 3, window: 60s }
";

/// The example's Envoy with the two descriptors of docs/envoy.md's recipe, a timeout
/// that a loaded test machine does not reach, and `failure_mode_deny` (a take whose
/// answer Envoy never saw must not let the request through unheld).
fn config() -> String {
    let rate_limits = "                      rate_limits:
                        - actions:
                            - request_headers: { header_name: x-tenant, descriptor_key: tenant }
                            - request_headers: { header_name: x-request-id, descriptor_key: request_id }
                        - apply_on_stream_done: true
                          actions:
                            - generic_key: { descriptor_key: release, descriptor_value: \"1\" }
                            - request_headers: { header_name: x-tenant, descriptor_key: tenant }
                            - request_headers: { header_name: x-request-id, descriptor_key: request_id }
";
    let config = example()
        .replace(
            "                      rate_limits:
                        - actions:
                            - remote_address: {}      # descriptor: remote_address=<client ip>
",
            rate_limits,
        )
        .replace("timeout: 0.02s", "timeout: 2s")
        .replace("failure_mode_deny: false", "failure_mode_deny: true");
    assert!(config.contains("apply_on_stream_done") && config.contains("timeout: 2s"));
    config
}

/// How many requests of each tenant the upstream serves now, and the most at once.
#[derive(Default)]
struct Serving(Mutex<HashMap<String, (u32, u32)>>);

impl Serving {
    fn most(&self, tenant: &str) -> u32 {
        self.0
            .lock()
            .unwrap()
            .get(tenant)
            .map_or(0, |&(_, most)| most)
    }
}

/// An upstream that answers each request after `x-delay-ms` (default 300), counting the
/// requests of each `x-tenant` it is serving.
fn slow_upstream() -> (u16, Arc<Serving>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let serving = Arc::new(Serving::default());
    let counts = Arc::clone(&serving);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counts = Arc::clone(&counts);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let (mut tenant, mut delay) = (String::new(), 300);
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("x-tenant: ") {
                            tenant = v.trim().to_owned();
                        } else if let Some(v) = lower.strip_prefix("x-delay-ms: ") {
                            delay = v.trim().parse().unwrap_or(300);
                        }
                    }
                    {
                        let mut c = counts.0.lock().unwrap();
                        let (now, most) = c.entry(tenant.clone()).or_default();
                        *now += 1;
                        *most = (*most).max(*now);
                    }
                    std::thread::sleep(Duration::from_millis(delay));
                    counts.0.lock().unwrap().get_mut(&tenant).unwrap().0 -= 1;
                    let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if reader.get_mut().write_all(ok.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, serving)
}

/// Spillway on the policy behind Envoy, in front of the slow upstream: Spillway's
/// HTTP port, Envoy's, and what the upstream counts.
fn behind_envoy(procs: &mut Procs) -> (u16, u16, Arc<Serving>) {
    let (grpc, http) = spillway(procs, POLICY);
    let (app, serving) = slow_upstream();
    (http, envoy(procs, &config(), grpc, app), serving)
}

/// The holds of `tenant` in use, as Spillway reports a look (cost 0).
fn in_use(http: u16, tenant: &str) -> u64 {
    let body = format!(
        r#"{{"domain":"api","cost":0,"descriptors":[{{"entries":[{{"key":"tenant","value":"{tenant}"}},{{"key":"request_id","value":"look"}}]}}]}}"#
    );
    let answer = curl(http, "/v1/check", Some(&body));
    let json: serde_json::Value =
        serde_json::from_str(answer.split_once(' ').map_or("", |(_, b)| b)).unwrap();
    3 - json["descriptors"][0]["remaining"].as_u64().unwrap()
}

/// Polls until `tenant` holds `want` slots; how long that took. Envoy sends the
/// stream-done call after the response, so a client can be quicker than it.
fn until_in_use(http: u16, tenant: &str, want: u64) -> Duration {
    let start = SystemClock.now();
    let elapsed = || SystemClock.now().duration_since(start);
    while in_use(http, tenant) != want {
        assert!(
            elapsed() < Duration::from_secs(20),
            "{tenant} never came to {want} holds (now {})",
            in_use(http, tenant)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    elapsed()
}

#[test]
fn envoy_lets_at_most_three_requests_of_a_tenant_reach_the_upstream_at_once() {
    let mut procs = Procs(Vec::new());
    let (http, port, serving) = behind_envoy(&mut procs);

    // 20 clients, 5 requests each, all for one tenant; another tenant beside them.
    let clients: Vec<_> = (0..20)
        .map(|c| {
            std::thread::spawn(move || {
                let tenant = if c < 16 { "acme" } else { "other" };
                (0..5)
                    .map(|_| (tenant, get(port, "/", &[("x-tenant", tenant)]).0))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut statuses: HashMap<(&str, u16), u32> = HashMap::new();
    for c in clients {
        for answer in c.join().unwrap() {
            *statuses.entry(answer).or_default() += 1;
        }
    }
    let count = |tenant, status| statuses.get(&(tenant, status)).copied().unwrap_or(0);
    assert_eq!(
        count("acme", 200) + count("acme", 429),
        80,
        "only 200 and 429: {statuses:?}"
    );
    assert!(
        serving.most("acme") <= 3,
        "the upstream saw {} at once",
        serving.most("acme")
    );
    assert_eq!(
        serving.most("acme"),
        3,
        "the limit was reached: {statuses:?}"
    );
    assert!(
        count("acme", 429) > 0 && count("acme", 200) >= 3,
        "{statuses:?}"
    );
    assert!(serving.most("other") <= 3, "{statuses:?}");
    // Every hold given back at stream done: none left, long before the lease.
    until_in_use(http, "acme", 0);
    until_in_use(http, "other", 0);
}

/// A client that goes away mid-response frees its slot when Envoy's stream-done call
/// arrives (at once, checked below: long before the 60 s lease), not at the lease.
#[test]
fn a_client_that_disconnects_mid_response_frees_its_slot_at_stream_done() {
    let mut procs = Procs(Vec::new());
    let (http, port, _) = behind_envoy(&mut procs);

    // Three slow requests take the three slots and wait for their answers.
    let mut streams: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(
                b"GET / HTTP/1.1\r\nhost: app\r\nx-tenant: slow\r\nx-delay-ms: 30000\r\n\r\n",
            )
            .unwrap();
            s
        })
        .collect();
    until_in_use(http, "slow", 3);
    assert_eq!(get(port, "/", &[("x-tenant", "slow")]).0, 429, "full");
    // One gives up: its slot comes back at stream done.
    drop(streams.remove(0));
    let freed_in = until_in_use(http, "slow", 2);
    assert!(freed_in < Duration::from_secs(10), "freed in {freed_in:?}");
    assert_eq!(get(port, "/", &[("x-tenant", "slow")]).0, 200);
}
