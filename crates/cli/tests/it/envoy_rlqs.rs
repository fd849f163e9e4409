//! The Rate Limit Quota Service behind a real Envoy (1.40, examples/rlqs/envoy.yaml):
//! Envoy reports its buckets on a stream and runs the token bucket Spillway assigns,
//! with no call per request; a bucket whose rule blocks everything gets DENY_ALL.

use crate::support;

mod breaks;
mod sharing;

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
