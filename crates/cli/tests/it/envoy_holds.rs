//! In-flight limits behind a real Envoy (1.40): "at most 3 requests of a tenant at
//! once". The route's request-path descriptor takes a hold named by the request's id
//! (`x-request-id`, which Envoy makes when a client sends none); a second descriptor
//! with `apply_on_stream_done` and a `release` entry first gives it back when the
//! stream ends, also when the client goes away mid-response. The upstream answers
//! slowly and records how many requests of each tenant it serves at once.
//!
//! And what a client can try (#60): one `x-request-id` sent by every client, with
//! Envoy's default connection manager (the client's id reaches Spillway) and with the
//! recipe's (`use_remote_address`: Envoy makes every id); a short request naming a
//! long one's id; requests reset while their take is on its way to the store.

use crate::support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spillway_core::{Clock, SystemClock};

use support::envoy::{envoy, example_with, get, spillway};
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
/// answer Envoy never saw must not let the request through unheld). Its connection
/// manager keeps a client's `x-request-id` (Envoy's default).
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
    example_with(rate_limits, "2s")
}

/// [`config`] with the recipe's connection manager: every request an edge request,
/// its `x-request-id` Envoy's own (a client's is replaced).
fn recipe() -> String {
    let config = config().replace(
        "                stat_prefix: ingress\n",
        "                stat_prefix: ingress\n                use_remote_address: true\n                preserve_external_request_id: false\n",
    );
    assert!(config.contains("use_remote_address: true"));
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
    behind(procs, &config())
}

/// [`behind_envoy`] with Envoy on `config`.
fn behind(procs: &mut Procs, config: &str) -> (u16, u16, Arc<Serving>) {
    let (grpc, http) = spillway(procs, POLICY);
    let (app, serving) = slow_upstream();
    (http, envoy(procs, config, grpc, app), serving)
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

/// #60: every client sent one fixed `x-request-id`, and a take of a held id was
/// admitted as a renewal: 8 clients at once were all served against a limit of 3.
/// Now, with Envoy's default connection manager (the client's id reaches Spillway) and
/// with the recipe's (Envoy's own ids), 10 clients at once sending one id never have
/// more than 3 served at once, and every hold is back at the end.
#[test]
fn ten_clients_sending_one_request_id_are_served_three_at_a_time() {
    for (what, config) in [("default", config()), ("recipe", recipe())] {
        let mut procs = Procs(Vec::new());
        let (http, port, serving) = behind(&mut procs, &config);
        let clients: Vec<_> = (0..10)
            .map(|_| {
                std::thread::spawn(move || {
                    (0..4)
                        .map(|_| {
                            let headers = [("x-tenant", "fixed"), ("x-request-id", "same-id")];
                            get(port, "/", &headers).0
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let statuses: Vec<u16> = clients
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        let ok = statuses.iter().filter(|&&s| s == 200).count();
        assert!(
            statuses.iter().all(|&s| s == 200 || s == 429),
            "{what}: {statuses:?}"
        );
        assert!(
            serving.most("fixed") <= 3,
            "{what}: the upstream served {} at once",
            serving.most("fixed")
        );
        assert!(ok >= 3, "{what}: {ok} served");
        until_in_use(http, "fixed", 0);
    }
}

/// A short request naming a long request's id does not free the long one's slot:
/// admitted, it holds a slot of its own and gives back one; denied (full), its
/// stream-done call gives back the mark its denial left, not the long one's hold.
/// Envoy's default connection manager: the client's ids reach Spillway.
#[test]
fn a_short_request_with_a_long_ones_id_does_not_free_its_slot() {
    let mut procs = Procs(Vec::new());
    let (http, port, serving) = behind_envoy(&mut procs);
    let long = |id: &str| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let request = format!(
            "GET / HTTP/1.1\r\nhost: app\r\nx-tenant: t\r\nx-request-id: {id}\r\n\
             x-delay-ms: 30000\r\n\r\n"
        );
        s.write_all(request.as_bytes()).unwrap();
        s
    };
    let short = |id: &str| get(port, "/", &[("x-tenant", "t"), ("x-request-id", id)]).0;
    let _l = long("L");
    until_in_use(http, "t", 1);
    assert_eq!(short("L"), 200, "room: admitted, a slot of its own");
    until_in_use(http, "t", 1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(in_use(http, "t"), 1, "the long one still holds its slot");
    let _more = [long("M"), long("N")];
    until_in_use(http, "t", 3);
    assert_eq!(short("L"), 429, "full");
    // Its stream-done call came and went: the three long ones still hold.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(in_use(http, "t"), 3);
    assert_eq!(short("other"), 429, "still full");
    assert!(serving.most("t") <= 3);
}

/// #60: Envoy cancels a request-path call still in flight when its client goes away,
/// and sends no stream-done call; the store had charged by then, so three such resets
/// a minute kept a tenant locked out. Spillway on Redis behind a proxy that delays it
/// a second (the take is on its way when the client leaves): 20 clients reset their
/// request; afterwards the tenant's 3 slots are all free at once, not after the
/// lease.
#[test]
fn requests_reset_while_their_take_is_in_flight_leave_no_hold() {
    use spillway_testkit::proxy::{Proxy, ProxyMode};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let redis = spillway_testkit::redis::standalone_url();
    let proxy = rt.block_on(Proxy::start(
        redis.trim_start_matches("redis://").parse().unwrap(),
    ));
    let mut procs = Procs(Vec::new());
    let prefix = spillway_testkit::redis::unique_prefix("envoy-reset");
    let store = format!("redis://{}", proxy.addr());
    let env = [
        ("SPILLWAY_STORE", store.as_str()),
        ("SPILLWAY_STORE_TIMEOUT", "10s"),
        ("SPILLWAY_KEY_PREFIX", prefix.as_str()),
    ];
    let (grpc, http) = support::envoy::spillway_with(&mut procs, POLICY, &env);
    let (app, serving) = slow_upstream();
    let port = envoy(&mut procs, &config(), grpc, app);
    assert_eq!(
        get(port, "/", &[("x-tenant", "r"), ("x-delay-ms", "1")]).0,
        200
    );
    until_in_use(http, "r", 0);

    proxy.set(ProxyMode::Delay(Duration::from_secs(1)));
    // Twenty (past 16 waiting: see server/tests/it/cancel.rs).
    for _ in 0..20 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: app\r\nx-tenant: r\r\n\r\n")
            .unwrap();
        // The take is on its way to Redis; the client goes away.
        std::thread::sleep(Duration::from_millis(100));
        drop(s);
    }
    proxy.set(ProxyMode::Pass);
    let freed = until_in_use(http, "r", 0);
    assert!(freed < Duration::from_secs(20), "freed in {freed:?}");
    // Three at once, all admitted.
    let held: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nhost: app\r\nx-tenant: r\r\nx-delay-ms: 5000\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    until_in_use(http, "r", 3);
    let start = SystemClock.now();
    while serving.most("r") < 3 {
        assert!(SystemClock.now().duration_since(start) < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(held);
    drop(rt);
}
