//! The Rate Limit Quota Service behind a real Envoy (1.40, examples/rlqs/envoy.yaml):
//! Envoy reports its buckets on a stream and runs the token bucket Spillway assigns,
//! with no call per request; a bucket whose rule blocks everything gets DENY_ALL.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
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

/// Polls until Spillway has assigned `tenant`'s bucket a share (Envoy reports a new
/// bucket at once; its answer takes a round trip).
fn until_assigned(admin: u16, tenant: &str) -> f64 {
    let start = SystemClock.now();
    loop {
        let explained = explain(admin, tenant);
        if let Some(share) = explained["holders"][0]["share_per_second"].as_f64() {
            return share;
        }
        assert!(
            SystemClock.now().duration_since(start) < Duration::from_secs(20),
            "no assignment: {explained}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One Envoy, alone on a tenant's bucket of 10 a second: it gets the whole 10, and over
/// a few seconds of requests from eight clients as fast as it answers, admits 10 a second and a bucket's
/// worth (its token bucket starts full), not more, and not much less.
#[test]
fn envoy_runs_the_token_bucket_spillway_assigns() {
    let mut procs = Procs(Vec::new());
    let admin = free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let (grpc, _) = spillway_with(
        &mut procs,
        &example("policies/api.yaml"),
        &[("SPILLWAY_ADMIN_ADDR", &admin_addr)],
    );
    let port = envoy(&mut procs, &example("envoy.yaml"), grpc, upstream());

    // The first request makes the bucket (no assignment yet: allowed, as the config's
    // no_assignment_behavior says) and its report.
    assert_eq!(status(port, "acme"), 200);
    assert_eq!(
        until_assigned(admin, "acme"),
        10.0,
        "alone, the whole limit"
    );

    // Eight clients, as fast as Envoy answers, for 3 s.
    let start = SystemClock.now();
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let (mut admitted, mut denied) = (0u32, 0u32);
                while SystemClock.now().duration_since(start) < Duration::from_secs(3) {
                    match status(port, "acme") {
                        200 => admitted += 1,
                        429 => denied += 1,
                        other => panic!("status {other}"),
                    }
                }
                (admitted, denied)
            })
        })
        .collect();
    let (mut admitted, mut denied) = (0u32, 0u32);
    for c in clients {
        let (a, d) = c.join().unwrap();
        admitted += a;
        denied += d;
    }
    let secs = SystemClock.now().duration_since(start).as_secs_f64();
    let most = (10.0 * secs).ceil() as u32 + 10;
    eprintln!("{admitted} admitted, {denied} denied in {secs:.2} s (at most {most})");
    assert!(denied > 0, "the bucket ran dry");
    assert!(
        admitted <= most,
        "{admitted} admitted in {secs:.2} s, more than {most}"
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
