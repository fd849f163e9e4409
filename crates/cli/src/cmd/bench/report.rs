//! What `spillway bench` prints: a table, or JSON with `--json`.

use serde_json::json;

use super::BenchArgs;
use super::cpu::Cost;
use super::load::{Loop, Tally};

/// Nanoseconds as milliseconds, to a tenth.
fn ms(ns: u64) -> f64 {
    (ns as f64 / 100_000.0).round() / 10.0
}

/// The waits of the admissions after one (`--max-wait`), for the JSON report.
fn waited(t: &Tally) -> serde_json::Value {
    if t.waits.is_empty() {
        return serde_json::Value::Null;
    }
    json!({
        "count": t.waits.len(),
        "p50_ms": ms(t.waits.value_at_quantile(0.5)),
        "p99_ms": ms(t.waits.value_at_quantile(0.99)),
        "max_ms": ms(t.waits.max()),
    })
}

pub(super) fn report(
    args: &BenchArgs,
    target: &str,
    mode: Loop,
    t: &Tally,
    cost: &Cost,
    check: Option<(u64, u64)>,
    holds: Option<(std::time::Duration, u64)>,
) {
    let tenth = |x: f64| (x * 10.0).round() / 10.0;
    let secs = t.elapsed.as_secs_f64();
    let per_sec = t.decisions() as f64 / secs;
    // The histogram holds nanoseconds; reports say microseconds.
    let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
    let q = |p: f64| us(t.latency.value_at_quantile(p));
    let load = match mode {
        Loop::Closed { callers } => format!("closed loop, {callers} callers"),
        Loop::Open { per_sec } => format!("open loop, {per_sec} requests/s"),
    };
    let keys = if args.hot {
        "one hot key".to_owned()
    } else if let Some(s) = args.zipf {
        format!("{} keys, Zipf s={s}", args.keys)
    } else {
        format!("{} keys, uniform", args.keys)
    };
    if args.json {
        let check = check.map(|(admitted, allowed)| json!({ "admitted": admitted, "allowed": allowed, "ok": admitted <= allowed }));
        println!(
            "{}",
            json!({
                "target": target, "load": load, "keys": keys, "elapsed_s": secs,
                "decisions": t.decisions(), "decisions_per_sec": per_sec,
                "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99), "p999_us": q(0.999), "max_us": us(t.latency.max()),
                "admitted": t.admitted, "rejected": t.rejected, "errors": t.error_count(), "errors_by_kind": t.errors,
                "waited": waited(t),
                "check": check,
                "holds": holds.map(|(hold, most)| json!({ "hold_ms": hold.as_millis() as u64, "most_of_one_key_at_once": most })),
                "cpu_us_per_decision": {
                    "bench": tenth(cost.bench), "server": cost.server.map(tenth),
                    "redis": cost.redis.map(tenth),
                },
                "decisions_per_redis_call": cost.per_call.map(tenth), "redis_calls": cost.calls,
            })
        );
        return;
    }
    println!("target      {target}");
    println!("load        {load}, {keys}, {:.1} s", secs);
    println!("decisions   {} ({per_sec:.0}/s)", t.decisions());
    println!(
        "admitted    {}   rejected {}   errors {}",
        t.admitted,
        t.rejected,
        t.error_count()
    );
    for (kind, n) in &t.errors {
        println!("  {kind:<18} {n}");
    }
    if !t.waits.is_empty() {
        let w = |p: f64| ms(t.waits.value_at_quantile(p));
        println!(
            "waited      {} of the admitted   wait ms  p50 {}  p99 {}  max {}",
            t.waits.len(),
            w(0.5),
            w(0.99),
            ms(t.waits.max())
        );
    }
    println!(
        "latency µs  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        q(0.5),
        q(0.9),
        q(0.99),
        q(0.999),
        us(t.latency.max())
    );
    let mut cpu = format!("this process {:.1}", cost.bench);
    if let Some(server) = cost.server {
        cpu.push_str(&format!("  server {server:.1}"));
    }
    if let Some(redis) = cost.redis {
        cpu.push_str(&format!("  redis {redis:.1}"));
    }
    println!("cpu µs      {cpu} per decision");
    if let (Some(per_call), Some(calls)) = (cost.per_call, &cost.calls) {
        println!("redis       {per_call:.1} decisions per call, {calls}");
    }
    if let Some((hold, most)) = holds {
        println!(
            "holds       each held {hold:?}; at most {most} of one key live at once (from admission to release)"
        );
    }
    if let Some((admitted, allowed)) = check {
        if admitted <= allowed {
            println!(
                "check       ok: {admitted} admitted, the limit allows {allowed} in {secs:.1} s"
            );
        } else {
            println!(
                "check       FAILED: {admitted} admitted, the limit allows only {allowed} in {secs:.1} s"
            );
        }
    }
}
