//! `spillway simulate`, run as a real process.

use std::process::{Command, Output};

use serde_json::Value;

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("spillway runs")
}

fn json(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["simulate", "--json"];
    all.extend_from_slice(args);
    let out = spillway(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .expect("valid JSON")
        .as_array()
        .expect("an array")
        .clone()
}

fn by_label<'a>(reports: &'a [Value], label: &str) -> &'a Value {
    reports
        .iter()
        .find(|r| r["label"] == label)
        .unwrap_or_else(|| panic!("no {label} in {reports:?}"))
}

#[test]
fn boundary_attack_doubles_fixed_window_and_the_log_holds_the_limit() {
    let reports = json(&["--pattern", "boundary", "--limit", "50", "--window", "10s"]);
    assert_eq!(
        reports.len(),
        7,
        "all = 5 algorithms with sliding_window in 3 edge modes"
    );
    for r in &reports {
        for field in [
            "algorithm",
            "admitted",
            "rejected",
            "max_in_window",
            "limit",
            "bytes_per_key",
        ] {
            assert!(!r[field].is_null(), "{field} missing from {r}");
        }
        assert_eq!(r["limit"], 50);
    }
    assert_eq!(by_label(&reports, "fixed_window")["max_in_window"], 100);
    assert_eq!(by_label(&reports, "sliding_log")["max_in_window"], 50);
    assert_eq!(by_label(&reports, "sliding_log")["over_admitted_vs_log"], 0);
    assert_eq!(
        by_label(&reports, "sliding_window p=1 strict")["max_in_window"],
        50
    );
    assert_eq!(
        by_label(&reports, "sliding_window p=1 lenient")["max_in_window"],
        100
    );
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_does_not() {
    let args = [
        "--pattern",
        "adversarial",
        "--limit",
        "20",
        "--window",
        "1s",
        "--duration",
        "30s",
    ];
    let a = json(&[&args[..], &["--seed", "3"]].concat());
    assert_eq!(a, json(&[&args[..], &["--seed", "3"]].concat()));
    assert_ne!(a, json(&[&args[..], &["--seed", "4"]].concat()));
}

#[test]
fn exact_algorithms_hold_their_bound_on_random_traffic() {
    for pattern in ["poisson", "adversarial", "bursts", "uniform"] {
        let reports = json(&[
            "--pattern",
            pattern,
            "--limit",
            "30",
            "--window",
            "2s",
            "--duration",
            "2m",
            "--precision",
            "4",
        ]);
        for r in &reports {
            if let Some(bound) = r["bound"].as_u64() {
                assert!(
                    r["max_in_window"].as_u64().unwrap() <= bound,
                    "{pattern}: {r}"
                );
            }
        }
    }
}

#[test]
fn draws_svg_and_png_charts() {
    let dir = std::env::temp_dir().join(format!("spillway-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (svg, png) = (dir.join("c.svg"), dir.join("c.png"));
    let out = spillway(&[
        "simulate",
        "--algorithms",
        "fixed_window,sliding_log",
        "--svg",
        svg.to_str().unwrap(),
        "--png",
        png.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("fixed_window (max 200)"),
        "legend missing"
    );
    assert_eq!(&std::fs::read(&png).unwrap()[1..4], b"PNG");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prints_a_table_by_default() {
    let out = spillway(&["simulate", "--algorithms", "gcra"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("max in any window") && text.contains("gcra"),
        "{text}"
    );
}

#[test]
fn bad_input_gets_one_clear_line_and_a_non_zero_exit() {
    let cases: &[(&[&str], &str)] = &[
        (&["--window", "0s"], "window must be at least 1µs"),
        (
            &["--limit", "-5"],
            "must be a positive whole number, got -5",
        ),
        (&["--limit", "0"], "must be a positive whole number, got 0"),
        (
            &["--algorithms", "leaky_bucket"],
            "unknown algorithm `leaky_bucket`",
        ),
        (
            &[
                "--algorithms",
                "sliding_window",
                "--window",
                "5us",
                "--precision",
                "10",
            ],
            "precision 10 is larger than the window in µs (5)",
        ),
        (
            &["--pattern", "zigzag"],
            "invalid value 'zigzag' for '--pattern",
        ),
        (&["--edge", "sideways"], "unknown edge `sideways`"),
        (&["--window", "soon"], "is not a duration"),
        (&["--rate", "-1"], "--rate must be a positive number"),
        (
            &["--pattern", "uniform", "--rate", "1e9", "--duration", "1h"],
            "the most is 20000000",
        ),
    ];
    for (args, want) in cases {
        let out = spillway(&[&["simulate"], *args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(want),
            "{args:?}: wanted `{want}` in `{stderr}`"
        );
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: more than one line: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: printed a report anyway");
    }
}

#[test]
fn help_has_an_example() {
    let out = spillway(&["simulate", "--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Examples:"));
}

#[test]
fn servers_sharing_by_lease_or_sync_stay_within_the_bounds_they_state() {
    for pattern in ["poisson", "bursts", "adversarial"] {
        for seed in ["1", "2", "3"] {
            for sharing in [["--lease", "10"], ["--sync", "50ms"]] {
                let run = &json(&[
                    "--servers",
                    "3",
                    sharing[0],
                    sharing[1],
                    "--pattern",
                    pattern,
                    "--seed",
                    seed,
                    "--limit",
                    "200",
                    "--window",
                    "10s",
                ])[0];
                let at = |k: &str| run[k].as_u64().unwrap();
                let what = format!("{pattern} seed {seed} {sharing:?}: {run}");
                assert!(at("over_admitted") <= at("bound_over"), "{what}");
                assert!(at("under_admitted") <= at("bound_under"), "{what}");
                assert!(at("store_calls") < at("requests"), "{what}");
                assert_eq!(run["algorithm"], "fixed_window");
            }
        }
    }
}

#[test]
fn a_lease_on_an_algorithm_that_cannot_keep_its_bound_is_refused() {
    let out = spillway(&[
        "simulate",
        "--servers",
        "2",
        "--lease",
        "5",
        "--algorithms",
        "gcra",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lease applies to fixed_window only"), "{err}");
}

/// `--algorithms distinct` measures distinct limits per N: exact ones exactly, sketched
/// ones with the estimate near N and few members decided wrong; mixed with request
/// algorithms it is refused with the reason.
#[test]
fn distinct_is_measured_against_the_truth() {
    let rows = json(&["--algorithms", "distinct", "--members", "40,3000"]);
    assert_eq!(rows.len(), 2);
    let n = |row: &Value, field: &str| row[field].as_u64().unwrap();
    let (exact, sketch) = (&rows[0], &rows[1]);
    assert_eq!(
        (n(exact, "members"), exact["mode"].as_str()),
        (40, Some("exact"))
    );
    assert_eq!((n(exact, "false_denies"), n(exact, "false_admits")), (0, 0));
    assert_eq!(
        (n(exact, "should_admit"), n(exact, "should_deny")),
        (80, 40)
    );
    assert_eq!(
        (n(sketch, "members"), sketch["mode"].as_str()),
        (3000, Some("sketch"))
    );
    let error = sketch["error_percent"].as_f64().unwrap();
    assert!(error.abs() < 3.0, "{sketch}");
    assert!(n(sketch, "estimated").abs_diff(3000) < 90, "{sketch}");
    assert!(
        n(sketch, "false_admits") > 0,
        "the sketch's membership error: {sketch}"
    );

    for args in [
        &["simulate", "--algorithms", "distinct,gcra"][..],
        &["simulate", "--algorithms", "distinct", "--servers", "2"],
        &["simulate", "--algorithms", "gcra", "--members", "10"],
    ] {
        let out = spillway(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("distinct"), "{args:?}: {err}");
    }
}

/// `--usage`: each admitted look is charged a usage after the fact, into debt. The exact
/// log never lets a window use more than the limit and one usage (a look is admitted
/// only while the trailing window holds at most the limit); a fixed window, whose
/// windows a trailing one straddles, twice that. What one window overspends, the next
/// pays back: over the run, what was used stays near the limit per window.
#[test]
fn usage_into_debt_is_bounded_per_window_and_paid_back_over_the_run() {
    let (limit, most) = (1000u64, 200u64);
    let reports = json(&[
        "--pattern",
        "poisson",
        "--limit",
        "1000",
        "--window",
        "1m",
        "--duration",
        "30m",
        "--usage",
        "1-200",
        "--algorithms",
        "fixed_window,sliding_log,token_bucket,gcra",
    ]);
    assert_eq!(reports.len(), 4, "one report per algorithm");
    for r in &reports {
        let u = &r["usage"];
        let (used, max) = (
            u["used"].as_u64().unwrap(),
            u["max_used_in_window"].as_u64().unwrap(),
        );
        assert!(used > 0 && max > limit, "{r}: the budget went into debt");
        let bound = match r["algorithm"].as_str().unwrap() {
            "sliding_log" => limit + most,
            "fixed_window" => 2 * (limit + most),
            // token_bucket and gcra: a full bucket, a window's refill, one usage past it.
            _ => 2 * limit + most,
        };
        assert!(max <= bound, "{r}: {max} used in a window, bound {bound}");
        let run = u["long_run_ratio"].as_f64().unwrap();
        assert!(run < 1.1, "{r}: debt is paid back over the run");
    }
    let out = spillway(&["simulate", "--usage", "1-10", "--servers", "2"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = spillway(&["simulate", "--usage", "10-1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("MIN 10 is above MAX 1"));
}
