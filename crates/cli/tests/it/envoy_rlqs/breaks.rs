//! RLQS behind a real Envoy when something breaks: the stream to Spillway reset by a
//! proxy (the same Envoy back keeps its share), Spillway killed and started again (Envoy
//! keeps its assignment meanwhile), Spillway shut down (Envoy told to run its fallback).

use super::*;

use std::sync::Mutex;

use spillway_testkit::proxy::{Proxy, ProxyMode};

/// An Envoy whose stream to Spillway a proxy resets while Spillway runs (a balancer's
/// reset, a blip) keeps its share, on the memory store and on Redis: its new stream,
/// from the same address, takes over the closed one's, so over the 15 s after the reset
/// it admits at least 80% of its share, and never a 3 s without an admission (a
/// `DENY_ALL`, as it was answered before).
#[test]
fn an_envoy_whose_stream_a_proxy_resets_keeps_its_share() {
    const RUN: Duration = Duration::from_secs(15);
    let rt = tokio::runtime::Runtime::new().unwrap();
    for redis in [None, Some(spillway_testkit::redis::standalone_url())] {
        let mut procs = Procs(Vec::new());
        let prefix = spillway_testkit::redis::unique_prefix("envoy-rlqs-reset");
        let mut env = Vec::new();
        if let Some(url) = &redis {
            env.extend([
                ("SPILLWAY_STORE", url.as_str()),
                ("SPILLWAY_KEY_PREFIX", prefix.as_str()),
                ("SPILLWAY_STORE_TIMEOUT", "1s"),
            ]);
        }
        let (grpc, admin) = spillway_on_example(&mut procs, &env);
        let upstream_addr = format!("127.0.0.1:{grpc}").parse().unwrap();
        let proxy = rt.block_on(Proxy::start(upstream_addr));
        let port = envoy(
            &mut procs,
            &example("envoy.yaml"),
            proxy.addr().port(),
            upstream(),
        );
        status(port, "acme");
        let share = until_assigned(admin, "acme");
        until_enforced(port, "acme");

        // The reset: Spillway sees the stream end, then the proxy passes again.
        proxy.set(ProxyMode::Reset);
        let start = SystemClock.now();
        while explain(admin, "acme")["holders"][0]["open"] != false {
            let waited = SystemClock.now().duration_since(start);
            assert!(waited < Duration::from_secs(20), "the stream never ended");
            std::thread::sleep(Duration::from_millis(10));
        }
        proxy.set(ProxyMode::Pass);

        // Four clients as fast as Envoy answers, each admission's time kept.
        let start = SystemClock.now();
        let admitted = Arc::new(Mutex::new(Vec::new()));
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let admitted = Arc::clone(&admitted);
                std::thread::spawn(move || {
                    while SystemClock.now().duration_since(start) < RUN {
                        if status(port, "acme") == 200 {
                            let at = SystemClock.now().duration_since(start);
                            admitted.lock().unwrap().push(at);
                        }
                    }
                })
            })
            .collect();
        clients.into_iter().for_each(|c| c.join().unwrap());
        let mut admitted = admitted.lock().unwrap().clone();
        admitted.sort();
        let store = if redis.is_some() { "redis" } else { "memory" };
        eprintln!(
            "{store}: {} admitted in {RUN:?} after the reset, share {share}",
            admitted.len()
        );
        let most_idle = (admitted.windows(2))
            .map(|w| w[1] - w[0])
            .chain(admitted.first().copied())
            .max()
            .unwrap_or(RUN);
        assert!(
            admitted.len() as f64 >= 0.8 * share * RUN.as_secs_f64(),
            "{store}: {} admitted in {RUN:?}, under 80% of {share} a second",
            admitted.len()
        );
        assert!(
            most_idle < Duration::from_secs(3),
            "{store}: {most_idle:?} without an admission"
        );
        // The same stream holds the bucket again: the new one took the old one's place.
        let holders = explain(admin, "acme")["holders"].as_array().unwrap().len();
        assert_eq!(holders, 1, "{store}");
    }
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
