//! A metered budget behind a real Envoy (1.40): each request is checked on the request
//! path with `hits_addend: 0`, and charged the tokens the upstream says it used
//! (`x-tokens-used`) by the same descriptor sent again when the stream is done
//! (`apply_on_stream_done`, `hits_addend` from `%RESP(x-tokens-used)%`). Against a
//! `metered` limit the budget goes into debt and the tenant is refused until it is paid
//! back; against the same limit unmetered, every charge past what remains is refused and
//! costs nothing, so the tenant is never refused (the leak docs/metering.md is about).

use crate::support;

use std::time::Duration;

use spillway_core::{Clock, SystemClock};

use support::envoy::{envoy, example, get, spillway_with, upstream_with};
use support::{FakeClock, Procs, curl};

/// The example's Envoy with the filter's own `rate_limits`: a look on the request path,
/// the usage from the response when the stream is done (the form docs/metering.md
/// shows), and no per-address limit.
fn config() -> String {
    let rate_limits = "                      domain: ai
                      rate_limits:
                        - actions:
                            - request_headers: { header_name: x-tenant, descriptor_key: tenant }
                          hits_addend: { number: 0 }
                        - actions:
                            - request_headers: { header_name: x-tenant, descriptor_key: tenant }
                          hits_addend: { format: \"%RESP(x-tokens-used)%\" }
                          apply_on_stream_done: true
";
    let config = example()
        .replace("                      domain: api\n", rate_limits)
        .replace(support::envoy::EXAMPLE_RATE_LIMITS, "");
    assert!(config.contains("apply_on_stream_done") && !config.contains("remote_address: {}"));
    config
}

/// The tokens `tenant` has left, as `/v1/check` reports a look (0 while in debt).
fn remaining(http: u16, tenant: &str) -> u64 {
    let body = format!(
        r#"{{"domain":"ai","cost":0,"descriptors":[{{"entries":[{{"key":"tenant","value":"{tenant}"}}]}}]}}"#
    );
    let answer = curl(http, "/v1/check", Some(&body));
    let json: serde_json::Value =
        serde_json::from_str(answer.split_once(' ').map_or("", |(_, b)| b)).unwrap_or_default();
    json["descriptors"][0]["remaining"].as_u64().unwrap_or(0)
}

/// Waits until the stream-done charge has reached Spillway (Envoy sends it after the
/// response, so a client can be quicker than it): `tenant`'s remaining drops below
/// `before`, or the budget is in debt.
fn charged(http: u16, tenant: &str, before: u64) {
    for attempt in 0.. {
        if before == 0 || remaining(http, tenant) < before {
            return;
        }
        assert!(attempt < 2_000, "the usage never reached Spillway");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Spillway on `policy` (with `env` set) behind Envoy, in front of an upstream that
/// used 600 tokens for every request: Spillway's HTTP port and Envoy's.
fn behind_envoy(procs: &mut Procs, policy: &str, env: &[(&str, &str)]) -> (u16, u16) {
    let (grpc, http) = spillway_with(procs, policy, env);
    let port = envoy(
        procs,
        &config(),
        grpc,
        upstream_with("x-tokens-used: 600\r\n"),
    );
    (http, port)
}

/// Four requests of `tenant` through Envoy on `port`, each admitted one waiting for its
/// stream-done charge to reach Spillway (on `http`) when `charges` says it is charged:
/// their statuses.
fn four_requests(http: u16, port: u16, tenant: &str, charges: bool) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let before = remaining(http, tenant);
        let (status, _) = get(port, "/", &[("x-tenant", tenant)]);
        statuses.push(status);
        if status == 200 && charges {
            charged(http, tenant, before);
        }
    }
    statuses
}

/// µs on the wall clock (through the core's clock, as everything reads it).
fn micros() -> u64 {
    SystemClock.now().as_micros()
}

/// Four requests, 600 tokens each, against 1,000 tokens per 10 s: 200, 200, then 429
/// while in debt, and 200 again once the refill has paid the debt back (about 2 s, never
/// sooner). The same budget unmetered admits all four.
#[test]
fn envoy_charges_usage_on_stream_done_into_a_metered_budgets_debt() {
    let policy = "domain: ai
descriptors:
  - key: tenant
    limits:
      - { name: tokens, algorithm: token_bucket, limit: 1000, window: 10s, metered: true }
";
    for (metered, want) in [(true, [200, 200, 429, 429]), (false, [200; 4])] {
        let policy = if metered {
            policy.to_owned()
        } else {
            policy.replace(", metered: true", "")
        };
        let mut procs = Procs(Vec::new());
        let (http, port) = behind_envoy(&mut procs, &policy, &[]);
        let statuses = four_requests(http, port, "t1", metered);
        assert_eq!(statuses, want, "metered: {metered}");
        if !metered {
            continue;
        }
        // In debt by about 200 tokens at 100 a second: admitted again after about 2 s.
        let in_debt = micros();
        refilled(http, "t1");
        let waited = micros() - in_debt;
        assert!(waited >= 1_500_000, "paid back too soon: {waited} µs");
        assert_eq!(get(port, "/", &[("x-tenant", "t1")]).0, 200);
    }
}

/// Waits until `tenant` has tokens again (its debt paid back, or Spillway's clock moved
/// into a new period: its reading of the file can lag by a call), for 10 s at most: its
/// remaining.
fn refilled(http: u16, tenant: &str) -> u64 {
    for tries in 0.. {
        let left = remaining(http, tenant);
        if left > 0 {
            return left;
        }
        assert!(tries < 1_000, "{tenant}'s tokens never came back");
        std::thread::sleep(Duration::from_millis(10));
    }
    unreachable!()
}

/// A period's budget behind Envoy: 1,000 tokens an hour (a fixed window), 600 used a
/// request, on a clock the test moves. The tenant is admitted twice (the second request
/// drives the period 200 into debt), refused from the third on while the period lasts,
/// and admitted again with the whole budget when the clock is moved into the next.
#[test]
fn envoy_refuses_a_spent_period_and_admits_again_when_it_rolls_over() {
    let policy = "domain: ai
descriptors:
  - key: tenant
    limits:
      - { name: tokens, algorithm: fixed_window, limit: 1000, window: 1h, metered: true }
";
    // The start of an hour: the period lasts an hour of real time, whatever the pauses.
    let clock = FakeClock::at("2026-12-01 10:00:00");
    let mut procs = Procs(Vec::new());
    let (http, port) = behind_envoy(&mut procs, policy, &clock.env());
    let statuses = four_requests(http, port, "t1", true);
    assert_eq!(
        statuses,
        [200, 200, 429, 429],
        "the period spent, into debt"
    );
    assert_eq!(remaining(http, "t1"), 0, "refused while the period lasts");
    clock.set("2026-12-01 11:00:30");
    assert_eq!(refilled(http, "t1"), 1000, "a new period, the whole budget");
    assert_eq!(get(port, "/", &[("x-tenant", "t1")]).0, 200);
}

/// A calendar month behind Envoy: 1,000 tokens a month in Europe/Berlin, 600 used a
/// request, with Spillway's wall clock (libfaketime, read from a file) at ten minutes
/// before Berlin's midnight at the end of November 2026. The tenant is admitted twice
/// (the second request drives November 200 into debt), refused while November lasts,
/// and admitted with December's whole budget once the clock is moved past midnight.
#[test]
fn envoy_refuses_a_spent_month_and_admits_again_when_it_rolls_over() {
    let policy = "domain: ai
descriptors:
  - key: tenant
    limits:
      - { name: tokens, algorithm: fixed_window, limit: 1000, period: month, time_zone: Europe/Berlin, metered: true }
";
    // 22:50 UTC is 23:50 in Berlin (CET): ten minutes of November left.
    let clock = FakeClock::at("2026-11-30 22:50:00");
    let mut procs = Procs(Vec::new());
    let (http, port) = behind_envoy(&mut procs, policy, &clock.env());
    let statuses = four_requests(http, port, "t1", true);
    assert_eq!(statuses, [200, 200, 429, 429], "November spent, into debt");
    assert_eq!(remaining(http, "t1"), 0, "refused while November lasts");
    // 23:00:30 UTC is half a minute into December in Berlin.
    clock.set("2026-11-30 23:00:30");
    assert_eq!(refilled(http, "t1"), 1000, "December: the whole budget");
    assert_eq!(get(port, "/", &[("x-tenant", "t1")]).0, 200);
}
