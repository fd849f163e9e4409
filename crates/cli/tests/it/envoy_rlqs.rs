//! The Rate Limit Quota Service behind a real Envoy (1.40, examples/rlqs/envoy.yaml):
//! Envoy reports its buckets on a stream and runs the token bucket Spillway assigns,
//! with no call per request; a bucket whose rule blocks everything gets DENY_ALL.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use spillway_core::{Clock, SystemClock};

use support::envoy::{envoy, spillway_with, upstream};
use support::{Procs, curl, free_port};

fn example(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/rlqs")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// `/v1/rlqs/explain` of tenant `tenant`'s bucket, on the admin port.
fn explain(admin: u16, tenant: &str) -> serde_json::Value {
    let body = format!(r#"{{"domain":"api","bucket":{{"tenant":"{tenant}"}}}}"#);
    let answer = curl(admin, "/v1/rlqs/explain", Some(&body));
    let (status, json) = answer.split_once(' ').unwrap();
    assert_eq!(status, "200", "{answer}");
    serde_json::from_str(json).unwrap()
}

/// One request of `tenant` through Envoy: its status, read from the status line (the
/// connection is dropped then: Envoy holds a connection it closes after a local reply
/// up to its delayed_close_timeout, a second, for the client to close first).
fn status(port: u16, tenant: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET / HTTP/1.1\r\nhost: app\r\nx-tenant: {tenant}\r\n\r\n"
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line[9..12].parse().unwrap()
}

/// `spillway serve` on the example's policy with `env` (an admin port of its own
/// added): its gRPC and admin ports.
fn spillway_on_example(procs: &mut Procs, env: &[(&str, &str)]) -> (u16, u16) {
    let admin = free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let env = [&[("SPILLWAY_ADMIN_ADDR", admin_addr.as_str())], env].concat();
    let (grpc, _) = spillway_with(procs, &example("policies/api.yaml"), &env);
    (grpc, admin)
}

/// Polls until Spillway has assigned `tenant`'s bucket a share (Envoy reports a new
/// bucket at once; its answer takes a round trip).
fn until_assigned(admin: u16, tenant: &str) -> f64 {
    let start = SystemClock.now();
    loop {
        let explained = explain(admin, tenant);
        if let Some(share) = explained["holders"][0]["booked_per_second"].as_f64() {
            return share;
        }
        assert!(
            SystemClock.now().duration_since(start) < Duration::from_secs(20),
            "no assignment: {explained}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Requests of `tenant` through Envoy at `port` until one is denied: Envoy then runs the
/// assignment (before it reads one, its `no_assignment_behavior` admits everything; the
/// server having sent it is not enough, on a busy machine).
fn until_enforced(port: u16, tenant: &str) {
    let start = SystemClock.now();
    while status(port, tenant) != 429 {
        assert!(
            SystemClock.now().duration_since(start) < Duration::from_secs(20),
            "Envoy never ran its assignment"
        );
    }
}

/// One Envoy, alone on a tenant's bucket of 10 a second: it gets the whole 10, and over
/// a few seconds of requests from eight clients as fast as it answers, admits from its
/// first denial on 10 a second, not more, and not much less over the run. (The bound is
/// counted from the first denial: until Envoy has read the assignment the server sent,
/// its `no_assignment_behavior` admits everything, and on a busy machine that takes a
/// few milliseconds of eight clients' requests. Answers are timed as they come back,
/// and a local 429 comes back sooner than a 200 from the upstream: one a client is
/// allowed either side of the first denial.)
#[test]
fn envoy_runs_the_token_bucket_spillway_assigns() {
    let mut procs = Procs(Vec::new());
    let (grpc, admin) = spillway_on_example(&mut procs, &[]);
    let port = envoy(&mut procs, &example("envoy.yaml"), grpc, upstream());

    // The first request makes the bucket (no assignment yet: allowed, as the config's
    // no_assignment_behavior says) and its report.
    assert_eq!(status(port, "acme"), 200);
    // (All of it but the floor kept for a newcomer: 19 every 2 s.)
    assert_eq!(
        until_assigned(admin, "acme"),
        9.5,
        "alone, the whole limit but a newcomer's floor"
    );

    // Eight clients, as fast as Envoy answers, for 3 s: each answer's status and when it
    // came.
    const CLIENTS: u32 = 8;
    let start = SystemClock.now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                while SystemClock.now().duration_since(start) < Duration::from_secs(3) {
                    let status = status(port, "acme");
                    assert!(matches!(status, 200 | 429), "status {status}");
                    answers.push((SystemClock.now().duration_since(start), status));
                }
                answers
            })
        })
        .collect();
    let answers: Vec<(Duration, u16)> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let secs = SystemClock.now().duration_since(start).as_secs_f64();
    let admitted = answers.iter().filter(|a| a.1 == 200).count() as u32;
    let denied = answers.len() as u32 - admitted;
    let first_denial = answers
        .iter()
        .filter(|a| a.1 == 429)
        .map(|a| a.0)
        .min()
        .expect("the bucket ran dry");
    let before = answers
        .iter()
        .filter(|a| a.1 == 200 && a.0 <= first_denial)
        .count() as u32;
    let after = admitted - before;
    // The bucket is empty at the first denial and fills at 10 a second; answers that
    // come after it may have been admitted just before it (one a client at most).
    let span = secs - first_denial.as_secs_f64();
    let most = (10.0 * span).ceil() as u32 + 1 + CLIENTS;
    eprintln!(
        "{admitted} admitted, {denied} denied in {secs:.2} s: {before} before the first denial \
         ({:.3} s), {after} after it (at most {most})",
        first_denial.as_secs_f64()
    );
    assert!(
        after <= most,
        "{after} admitted in {span:.2} s, more than {most}"
    );
    assert!(
        f64::from(admitted) >= 10.0 * secs * 0.8,
        "{admitted} admitted in {secs:.2} s"
    );

    // A tenant whose rule blocks everything: DENY_ALL once assigned (the first
    // requests, before it, as no_assignment_behavior says), then every request.
    let start = SystemClock.now();
    while status(port, "blocked") == 200 {
        assert!(
            SystemClock.now().duration_since(start) < Duration::from_secs(20),
            "never denied: {}",
            explain(admin, "blocked")
        );
    }
    let statuses: Vec<u16> = (0..20).map(|_| status(port, "blocked")).collect();
    assert!(statuses.iter().all(|&s| s == 429), "{statuses:?}");
}

/// Requests of `tenant` through Envoy at `port` from `clients` threads until `stop`, each
/// pausing `pause` between requests (none: as fast as Envoy answers): the admitted.
fn drive(
    port: u16,
    tenant: &'static str,
    clients: usize,
    pause: Duration,
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicU32>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let threads: Vec<_> = (0..clients)
            .map(|_| {
                let (stop, admitted) = (Arc::clone(&stop), Arc::clone(&admitted));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match status(port, tenant) {
                            200 => {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                            429 => {}
                            other => panic!("status {other}"),
                        }
                        // The load's shape (a rate), not a wait for anything.
                        std::thread::sleep(pause);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
    })
}

/// Each holder of `tenant`'s bucket with a live share: its replica and stream, share
/// and demand; and the shares added up.
fn shares(admin: u16, tenant: &str) -> (Vec<(String, f64, f64)>, f64) {
    let explained = explain(admin, tenant);
    let holders = explained["holders"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| {
            let share = h["booked_per_second"].as_f64()?;
            Some((
                format!("{}:{}", h["replica"].as_str()?, h["stream"].as_u64()?),
                share,
                h["demand_per_second"].as_f64()?,
            ))
        })
        .collect();
    (holders, explained["booked_per_second"].as_f64().unwrap())
}

/// Three Envoys sharing one bucket of 30 a second: one idle, one at about 2× an even
/// third (20 a second), one as fast as it can. Over the run all three admit no more
/// than the rate and two seconds' worth (the buckets' first fills and what increases
/// add), and once the shares settled, not much less; the busy two get most of the
/// shares, never more than 30 in total; when the
/// fastest Envoy is stopped, its share goes to the others within its assignment's TTL
/// (8 s here) and a report.
#[test]
fn three_envoys_share_one_bucket_by_demand() {
    three_envoys_share_one_bucket(None);
}

/// The same on two Spillway replicas of one Redis, the idle and the paced Envoy on the
/// first, the fastest on the second: the shares live in Redis, and the same bound holds.
#[test]
fn three_envoys_on_two_replicas_share_one_bucket_through_redis() {
    three_envoys_share_one_bucket(Some(spillway_testkit::redis::standalone_url()));
}

/// [`three_envoys_share_one_bucket_by_demand`], on one Spillway of the memory store, or
/// (`redis`) on two replicas of that Redis.
fn three_envoys_share_one_bucket(redis: Option<String>) {
    const RATE: f64 = 30.0;
    let mut procs = Procs(Vec::new());
    let policy = "domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 30 }
";
    let prefix = spillway_testkit::redis::unique_prefix("envoy-rlqs");
    let spillway = |procs: &mut Procs| {
        let admin = free_port();
        let admin_addr = format!("127.0.0.1:{admin}");
        let mut env = vec![
            ("SPILLWAY_ADMIN_ADDR", admin_addr.as_str()),
            ("SPILLWAY_RLQS_ASSIGNMENT_TTL", "8s"),
        ];
        if let Some(url) = &redis {
            env.extend([
                ("SPILLWAY_STORE", url.as_str()),
                ("SPILLWAY_KEY_PREFIX", prefix.as_str()),
                ("SPILLWAY_STORE_TIMEOUT", "1s"),
            ]);
        }
        let (grpc, _) = spillway_with(procs, policy, &env);
        (grpc, admin)
    };
    let (grpc, admin) = spillway(&mut procs);
    let (other, other_admin) = match &redis {
        Some(_) => spillway(&mut procs),
        None => (grpc, admin),
    };
    let config = example("envoy.yaml");
    let app = upstream();
    let ports: Vec<u16> = [grpc, grpc, other]
        .into_iter()
        .map(|to| envoy(&mut procs, &config, to, app))
        .collect();
    // The idle one makes its bucket with one request, and sends nothing more.
    status(ports[0], "shared");

    let stop = Arc::new(AtomicBool::new(false));
    let start = SystemClock.now();
    // The idle one's request counted.
    let admitted = Arc::new(AtomicU32::new(1));
    let load = |port, clients, pause| {
        drive(
            port,
            "shared",
            clients,
            pause,
            Arc::clone(&stop),
            Arc::clone(&admitted),
        )
    };
    let paced = load(ports[1], 2, Duration::from_millis(100));
    let fast = load(ports[2], 4, Duration::ZERO);
    // Three reports of each Envoy (every 5 s), checking the shares' total meanwhile (as
    // each replica sees it). The paced and the fastest Envoy start together, and each
    // finds the room the idle one (alone, it had all but a newcomer's floor) gives up
    // only at the idle one's next report: the one that comes second is sent its share
    // of 0 until its own next report. So the shares settle by the third report (10 s),
    // and what the Envoys admit is judged from there.
    let settled_at = Duration::from_secs(11);
    let mut settled = None;
    let mut most = 0.0f64;
    let mut timeline = Vec::new();
    for tick in 0.. {
        let at = SystemClock.now().duration_since(start);
        if at >= Duration::from_secs(17) {
            break;
        }
        if at >= settled_at && settled.is_none() {
            settled = Some((at, admitted.load(Ordering::Relaxed)));
        }
        let seen = shares(admin, "shared");
        most = most.max(seen.1).max(shares(other_admin, "shared").1);
        if tick % 5 == 0 {
            timeline.push((at, seen.0));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    paced.join().unwrap();
    fast.join().unwrap();
    let end = SystemClock.now().duration_since(start);
    let secs = end.as_secs_f64();
    let admitted = admitted.load(Ordering::Relaxed);
    let (holders, total) = shares(admin, "shared");
    eprintln!("{admitted} admitted in {secs:.2} s; shares {holders:?}, most assigned {most}");
    assert!(
        most <= RATE + 1e-9 && total <= RATE + 1e-9,
        "{most}, {total}"
    );
    let bound = (RATE * (secs + 2.0)).ceil() as u32;
    assert!(
        admitted <= bound,
        "{admitted} admitted in {secs:.2} s, more than {bound}"
    );
    let (from, before) = settled.expect("the run lasts past the third report");
    let since = (end - from).as_secs_f64();
    let after = admitted - before;
    assert!(
        f64::from(after) >= RATE * since * 0.6,
        "{after} admitted in the {since:.2} s since the shares settled"
    );
    // The busy two hold most of the rate; the idle one (the least demand) little more
    // than its floor.
    assert_eq!(holders.len(), 3, "{holders:?}");
    let mut by_demand = holders.clone();
    by_demand.sort_by(|a, b| a.2.total_cmp(&b.2));
    assert!(by_demand[0].1 < 0.2 * RATE, "{holders:?}");
    assert!(by_demand[1].1 + by_demand[2].1 > 0.75 * RATE, "{holders:?}");
    // Each Envoy's share over the run, a row a second (docs/algorithms.md shows it).
    eprintln!("| s | idle | paced | fastest | assigned |\n|---|---|---|---|---|");
    for (at, seen) in &timeline {
        let share = |who: usize| {
            seen.iter()
                .find(|h| h.0 == by_demand[who].0)
                .map_or("–".to_string(), |h| format!("{:.2}", h.1))
        };
        let total: f64 = seen.iter().map(|h| h.1).sum();
        eprintln!(
            "| {:.1} | {} | {} | {} | {total:.2} |",
            at.as_secs_f64(),
            share(0),
            share(1),
            share(2)
        );
    }

    // The fastest (the most demand) stops for good: its share goes to the others
    // within its TTL and a report (8 s + 5 s).
    let fast_holder = by_demand[2].0.clone();
    let fastest = procs.0.last_mut().unwrap();
    fastest.kill().unwrap();
    fastest.wait().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let again = Arc::new(AtomicU32::new(0));
    let paced = drive(
        ports[1],
        "shared",
        4,
        Duration::ZERO,
        Arc::clone(&stop),
        again,
    );
    let stopped = SystemClock.now();
    loop {
        let (holders, total) = shares(admin, "shared");
        assert!(total <= RATE + 1e-9, "{holders:?}");
        let gone = !holders.iter().any(|h| h.0 == fast_holder);
        let busy = holders.iter().map(|h| h.1).fold(0.0, f64::max);
        if gone && busy > 0.8 * RATE {
            eprintln!(
                "after {:?}: {holders:?}",
                SystemClock.now().duration_since(stopped)
            );
            break;
        }
        assert!(
            SystemClock.now().duration_since(stopped) < Duration::from_secs(20),
            "the stopped Envoy's share never came back: {holders:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    paced.join().unwrap();
}

/// Spillway killed and started again on the same port: meanwhile Envoy keeps running
/// its assignment (requests still limited, not let through), and at its next report
/// it subscribes again and gets a new one.
#[test]
fn envoy_keeps_its_assignment_while_spillway_restarts_and_subscribes_again() {
    let mut procs = Procs(Vec::new());
    let (grpc, http, admin) = (free_port(), free_port(), free_port());
    let dir = support::tempdir(&format!("rlqs-restart-{grpc}"));
    std::fs::write(dir.join("api.yaml"), example("policies/api.yaml")).unwrap();
    let serve = || {
        support::spawn_serve_with(
            [
                "--config".to_string(),
                dir.display().to_string(),
                "--http-addr".into(),
                format!("127.0.0.1:{http}"),
                "--grpc-addr".into(),
                format!("127.0.0.1:{grpc}"),
            ],
            &[("SPILLWAY_ADMIN_ADDR", &format!("127.0.0.1:{admin}"))],
        )
    };
    procs.0.push(serve());
    let port = envoy(&mut procs, &example("envoy.yaml"), grpc, upstream());
    status(port, "acme");
    assert_eq!(until_assigned(admin, "acme"), 9.5);
    until_enforced(port, "acme");

    // Spillway gone (SIGKILL): Envoy still limits to its assignment.
    procs.0[0].kill().unwrap();
    procs.0[0].wait().unwrap();
    let start = SystemClock.now();
    let (mut admitted, mut denied) = (0u32, 0u32);
    while SystemClock.now().duration_since(start) < Duration::from_secs(2) {
        match status(port, "acme") {
            200 => admitted += 1,
            _ => denied += 1,
        }
    }
    let secs = SystemClock.now().duration_since(start).as_secs_f64();
    eprintln!("Spillway down: {admitted} admitted, {denied} denied in {secs:.2} s");
    assert!(denied > 0 && f64::from(admitted) <= 10.0 * secs + 11.0);

    // Started again: Envoy subscribes at its next report (every 5 s).
    procs.0[0] = serve();
    let again = SystemClock.now();
    assert_eq!(until_assigned(admin, "acme"), 9.5);
    let took = SystemClock.now().duration_since(again);
    eprintln!("subscribed again after {took:?}");
    assert!(took < Duration::from_secs(11), "{took:?}");
}

/// With `rlqs_expire_on_shutdown`, a Spillway shut down (SIGTERM) sends every
/// assignment again with a TTL of 0 before its streams end: Envoy runs its
/// `expired_assignment_behavior` at once (examples/rlqs/envoy.yaml: one request a
/// second), not the assignment (10 a second) until its TTL.
#[test]
fn on_shutdown_envoy_can_be_told_to_run_its_fallback_at_once() {
    let mut procs = Procs(Vec::new());
    let (grpc, admin) =
        spillway_on_example(&mut procs, &[("SPILLWAY_RLQS_EXPIRE_ON_SHUTDOWN", "true")]);
    let port = envoy(&mut procs, &example("envoy.yaml"), grpc, upstream());
    status(port, "acme");
    assert_eq!(until_assigned(admin, "acme"), 9.5);
    until_enforced(port, "acme");

    let pid = procs.0[0].id().to_string();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(term.success());
    procs.0[0].wait().unwrap();
    let start = SystemClock.now();
    let mut admitted = 0u32;
    while SystemClock.now().duration_since(start) < Duration::from_secs(3) {
        admitted += u32::from(status(port, "acme") == 200);
    }
    let secs = SystemClock.now().duration_since(start).as_secs_f64();
    eprintln!("after shutdown: {admitted} admitted in {secs:.2} s");
    // The fallback's one a second and its one token, not the assignment's 10.
    assert!(
        f64::from(admitted) <= secs + 2.0,
        "{admitted} admitted in {secs:.2} s"
    );
}
