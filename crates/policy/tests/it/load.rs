//! Loading: the reference's load errors (each with file, line and field), Spillway's
//! own, and directories of files.

use std::path::Path;

fn error(yaml: &str) -> String {
    match spillway_policy::parse("p.yaml", yaml) {
        Ok(_) => panic!("loaded, but should not have:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn reference_load_errors_name_file_line_and_field() {
    let cases = [
        (
            "domain: ''\n",
            "p.yaml:1: domain: config file cannot have an empty domain",
        ),
        (
            "descriptors: []\n",
            "p.yaml: domain: config file has no domain",
        ),
        ("domain: d\nbogus: 1\n", "p.yaml:2: unknown field `bogus`"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, bogus: 2}\n",
            "p.yaml:4: unknown field `bogus`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: ''\n",
            "p.yaml:3: descriptors[0].key: descriptor has an empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
            "p.yaml:5: descriptors[1].key: duplicate descriptor composite key 'k_v'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
            "descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
            "p.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit ''",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}\n",
            "descriptors[0].rate_limit: should not have an unlimited rate limit with a unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n",
            "descriptors[0].rate_limit.replaces[0].name: replaces should not contain the name of the same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n",
            "descriptors[0].rate_limit.replaces[0].name: replaces name cannot be empty",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
            "p.yaml:5: descriptors[0].share_threshold: share_threshold can only be set on a value with a wildcard",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
            "p.yaml:4: invalid u32",
        ),
        ("domain: [\n", "p.yaml:1: "),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: c\n        rate_limit: {unit: day}\n        foo: 1\n",
            "unknown field `foo`",
        ),
    ];
    for (yaml, expected) in cases {
        let e = error(yaml);
        assert!(
            e.contains(expected),
            "for\n{yaml}\nexpected `{expected}` in `{e}`"
        );
    }
}

#[test]
fn spillway_format_errors_name_the_field() {
    let limits =
        |l: &str| format!("domain: d\ndescriptors:\n  - key: k\n    limits:\n      - {l}\n");
    let cases = [
        (
            "{limit: 10}",
            "descriptors[0].limits[0].window: a limit needs a window",
        ),
        (
            "{limit: 10, window: 1s, unit: second}",
            "descriptors[0].limits[0].window: set window or unit, not both",
        ),
        (
            "{limit: 10, window: soon}",
            "descriptors[0].limits[0].window: `soon` is not a duration",
        ),
        (
            "{limit: 10, window: 1s, algorithm: leaky}",
            "descriptors[0].limits[0].algorithm: unknown algorithm `leaky`",
        ),
        (
            "{limit: 0, window: 1s}",
            "descriptors[0].limits[0]: limit must be at least 1",
        ),
        (
            "{limit: 10, window: 1s, burst: 5}",
            "burst applies to token_bucket, gcra and shares, not fixed_window",
        ),
        (
            "{limit: 10, window: 1s, precision: 4}",
            "descriptors[0].limits[0].precision: precision applies to sliding_window and distinct",
        ),
        (
            "{limit: 3, window: 1h, algorithm: distinct, edge: strict}",
            "descriptors[0].limits[0].precision: precision applies to sliding_window and distinct, edge to sliding_window; not to distinct",
        ),
        (
            "{limit: 3, window: 1h, algorithm: distinct, count_rejected: true}",
            "count_rejected does not apply to distinct",
        ),
        (
            "{limit: 3, window: 1h, algorithm: distinct, lease: 1}",
            "descriptors[0].limits[0].lease:",
        ),
        (
            "{limit: 10, window: 1s, algorithm: sliding_window, precision: 7}",
            "does not split into 7 equal sub-buckets",
        ),
        (
            "{limit: 10, window: 1s, algorithm: sliding_window, edge: sideways}",
            "descriptors[0].limits[0].edge:",
        ),
        (
            "{limit: 10, window: 1s, colour: red}",
            "unknown field `colour`",
        ),
        (
            "{limit: 10, window: 1s, algorithm: gcra, lease: 5}",
            "descriptors[0].limits[0].lease: lease applies to fixed_window only: gcra credits \
             the time since a charge",
        ),
        (
            "{limit: 10, window: 1s, algorithm: sliding_window, sync: 100ms}",
            "descriptors[0].limits[0].sync: sync applies to fixed_window only",
        ),
        (
            "{limit: 10, window: 1s, lease: 11}",
            "lease 11 is larger than the limit 10",
        ),
        (
            "{limit: 10, window: 1s, lease: 2, count_rejected: true}",
            "lease does not apply to a count_rejected limit",
        ),
        (
            "{limit: 10, window: 1s, sync: 5ms}",
            "sync must be at least 10ms",
        ),
        (
            "{limit: 10, window: 1s, sync: 1s}",
            "sync must be shorter than the window",
        ),
        (
            "{limit: 10, window: 1s, sync: soon}",
            ".sync: `soon` is not a duration",
        ),
        (
            "{limit: 10, window: 1s, lease: 2, sync: 100ms}",
            "set lease or sync, not both",
        ),
        (
            "{limit: 10, window: 1s, algorithm: distinct, metered: true}",
            "descriptors[0].limits[0].metered: a distinct limit counts members",
        ),
        (
            "{limit: 10, window: 1s, metered: true, count_rejected: true}",
            ".metered: a metered limit charges every hit above 0 in full",
        ),
        (
            "{limit: 10, window: 1s, metered: true, lease: 2}",
            ".metered: a metered limit charges the store in full: no lease or sync",
        ),
        (
            "{limit: 10, window: 1s, period: month}",
            ".period: set a window, a unit or a calendar period, one of them",
        ),
        (
            "{limit: 10, period: fortnight}",
            ".period: unknown period `fortnight`: day, week, month or year",
        ),
        (
            "{limit: 10, period: month, time_zone: Mars/Olympus}",
            ".time_zone: unknown time zone `Mars/Olympus`",
        ),
        (
            "{limit: 10, window: 1m, time_zone: Europe/Berlin}",
            ".time_zone: time_zone applies to a calendar period",
        ),
        (
            "{limit: 10, period: month, algorithm: gcra}",
            "a calendar period applies to fixed_window, not gcra",
        ),
        (
            "{limit: 10, period: month, lease: 2}",
            ".lease: a calendar period takes no lease or sync",
        ),
        (
            "{limit: 10, period: day, time_zone: Europe/Berlin, sync: 100ms}",
            ".sync: a calendar period takes no lease or sync",
        ),
    ];
    for (limit, expected) in cases {
        let e = error(&limits(limit));
        assert!(
            e.contains(expected),
            "for {limit}: expected `{expected}` in `{e}`"
        );
    }

    let node = |extra: &str| format!("domain: d\ndescriptors:\n  - key: k\n{extra}");
    for (extra, expected) in [
        (
            "    mode: loud\n",
            "p.yaml:4: descriptors[0].mode: unknown mode `loud`",
        ),
        (
            "    on_store_error: maybe\n",
            "p.yaml:4: descriptors[0].on_store_error: unknown on_store_error `maybe`",
        ),
        (
            "    mode: enforce\n    shadow_mode: true\n",
            "mode: enforce contradicts shadow_mode: true",
        ),
        (
            "    rate_limit: {unit: second, requests_per_unit: 1}\n    limits: [{limit: 1, window: 1s}]\n",
            "descriptors[0].limits: a descriptor has either rate_limit or limits, not both",
        ),
        ("    limits: []\n", "descriptors[0].limits: limits is empty"),
        (
            "    limits: [{name: a, limit: 1, window: 1s}, {name: a, limit: 2, window: 1s}]\n",
            "descriptors[0].limits[1].name: two limits named `a` in one descriptor",
        ),
    ] {
        let e = error(&node(extra));
        assert!(
            e.contains(expected),
            "for {extra}: expected `{expected}` in `{e}`"
        );
    }
}

#[test]
fn every_mistake_of_a_file_is_reported_at_once() {
    let e = spillway_policy::parse(
        "p.yaml",
        "domain: d\ndescriptors:\n  - key: ''\n  - key: k\n    rate_limit: {unit: eon}\n  - key: k\n",
    )
    .unwrap_err();
    assert_eq!(e.0.len(), 3, "{e}");
    assert_eq!(
        e.0.iter().map(|e| e.line).collect::<Vec<_>>(),
        [Some(3), Some(5), Some(6)]
    );
}

#[test]
fn a_directory_loads_every_yaml_file_and_refuses_a_duplicate_domain() {
    let dir = tempdir("dir");
    std::fs::write(
        dir.join("a.yaml"),
        "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
    )
    .unwrap();
    std::fs::write(dir.join("b.yml"), "domain: b\n").unwrap();
    std::fs::write(dir.join(".hidden.yaml"), "not: [valid\n").unwrap();
    std::fs::write(dir.join("notes.txt"), "not yaml").unwrap();
    let set = spillway_policy::load(&dir).unwrap();
    let names: Vec<&str> = set.domains().iter().map(|d| d.name()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(set.domain("a").unwrap().rule_count(), 1);

    std::fs::write(dir.join("c.yaml"), "domain: a\n").unwrap();
    let e = spillway_policy::load(&dir).unwrap_err().to_string();
    assert!(
        e.contains("c.yaml: domain: duplicate domain 'a' (also in"),
        "{e}"
    );

    std::fs::write(dir.join("d.yaml"), "domain: [\n").unwrap();
    let e = spillway_policy::load(&dir).unwrap_err();
    assert_eq!(e.0.len(), 2, "both the duplicate and the broken file: {e}");

    let missing = spillway_policy::load(dir.join("missing"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("missing: cannot read"), "{missing}");
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("policy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A calendar period in a time zone loads as a fixed window counting per period, and a
/// metered limit as one whose hits above 0 are usage (`examples/metering/ai.yaml`).
#[test]
fn calendar_periods_and_metered_limits_load() {
    let domain = spillway_policy::parse(
        "p.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    limits:\n      - {limit: 5, period: month, time_zone: Europe/Berlin, metered: true}\n",
    )
    .unwrap();
    let rules = domain.resolve(&[("k", "v")]).unwrap().rules;
    let spillway_policy::RuleLimit::Limited(limit) = &rules[0].limit else {
        panic!("a limited rule");
    };
    assert_eq!(
        limit.to_string(),
        "5 per month in Europe/Berlin (fixed_window)"
    );
    assert!(rules[0].metered);
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/metering");
    assert!(spillway_policy::load(&example).is_ok());
}
