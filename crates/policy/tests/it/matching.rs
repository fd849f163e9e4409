//! Matching descriptors against the reference's example configuration and Spillway's
//! example policies, the way the reference's `GetLimit` does.

use spillway_core::Algorithm;
use spillway_policy::{Domain, Mode, OnStoreError, RuleLimit, Unit};

fn example(name: &str) -> Domain {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    spillway_policy::parse(&path, &std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn rpu(d: &Domain, entries: &[(&str, &str)]) -> Option<(u64, Option<Unit>)> {
    d.resolve(entries)
        .map(|m| (m.rules[0].requests_per_unit, m.rules[0].unit))
}

#[test]
fn reference_example_matches_as_the_reference_does() {
    let d = example("envoy/rl.yaml");
    assert_eq!(d.name(), "rl");
    assert_eq!(
        rpu(
            &d,
            &[("source_cluster", "proxy"), ("destination_cluster", "mock")]
        ),
        Some((1, Some(Unit::Minute)))
    );
    // The node at `source_cluster_proxy` has no rule of its own.
    assert_eq!(rpu(&d, &[("source_cluster", "proxy")]), None);
    // Key-only default at the top, with both a rule and children (the reference's "key5").
    assert_eq!(
        rpu(&d, &[("foo", "anything")]),
        Some((2, Some(Unit::Minute)))
    );
    assert_eq!(
        rpu(&d, &[("foo", "x"), ("bar", "y")]),
        Some((3, Some(Unit::Minute)))
    );
    // The exact value wins over the key-only default.
    let banned = d.resolve(&[("foo", "x"), ("bar", "banned")]).unwrap();
    assert_eq!(banned.rules[0].limit, RuleLimit::BlockAll);
    assert_eq!(
        rpu(&d, &[("foo", "x"), ("baz", "y")]),
        Some((1, Some(Unit::Second)))
    );
    let shady = d.resolve(&[("foo", "x"), ("baz", "shady")]).unwrap();
    assert_eq!(shady.rules[0].mode, Mode::Shadow);
    assert_eq!(
        d.resolve(&[("foo", "x"), ("bay", "y")]).unwrap().rules[0].limit,
        RuleLimit::Unlimited
    );
    assert_eq!(
        d.resolve(&[("qux", "y")]).unwrap().rules[0].limit,
        RuleLimit::Unlimited
    );
    // A deeper request than the config, or an unknown key: no limit.
    assert_eq!(
        rpu(&d, &[("foo", "x"), ("bar", "y"), ("deeper", "z")]),
        None
    );
    assert_eq!(rpu(&d, &[("nope", "x")]), None);
    assert_eq!(rpu(&d, &[]), None);
}

#[test]
fn every_value_gets_its_own_counter_unless_shared() {
    let d = example("envoy/rl.yaml");
    let a = d.resolve(&[("foo", "a")]).unwrap().group;
    let b = d.resolve(&[("foo", "b")]).unwrap().group;
    assert_ne!(
        a, b,
        "the request's value is part of the counter even on a key-only match"
    );

    let api = example("policies/api.yaml");
    let x = api.resolve(&[("path", "/admin/users")]).unwrap();
    let y = api.resolve(&[("path", "/admin")]).unwrap();
    assert_eq!(
        x.group, y.group,
        "share_threshold: one counter for every matching value"
    );
    assert_eq!(x.rules[0].name.as_deref(), Some("admin"));
    assert!(api.resolve(&[("path", "/public")]).is_none());
}

#[test]
fn native_limits_carry_algorithm_mode_and_failure_policy() {
    let api = example("policies/api.yaml");
    let m = api.resolve(&[("api_key", "k1")]).unwrap();
    assert_eq!(m.rules.len(), 2);
    let (burst, daily) = (&m.rules[0], &m.rules[1]);
    let RuleLimit::Limited(limit) = &burst.limit else {
        panic!("burst is limited")
    };
    assert_eq!(limit.algorithm(), Algorithm::Gcra);
    assert_eq!(limit.burst(), 20);
    assert_eq!(burst.on_store_error, Some(OnStoreError::Local));
    assert_ne!(burst.slot, daily.slot, "two limits of one node count apart");
    // One group per descriptor, the descriptor written once: every limit of it lands
    // in one Redis Cluster slot.
    let key = m.key(burst).unwrap();
    assert_eq!((key.group(), key.member()), ("api|api_key=k1", "#burst"));
    assert_eq!(m.key(daily).unwrap().group(), key.group());
    assert_eq!(daily.unit, Some(Unit::Day));
    assert!(!burst.reference);

    let upload = api
        .resolve(&[("api_key", "k1"), ("route", "upload")])
        .unwrap();
    assert_eq!(upload.rules[0].metric.as_ref(), "api_key.route_upload");

    let tenant = api.resolve(&[("tenant", "t")]).unwrap();
    assert_eq!(tenant.rules[0].mode, Mode::Shadow);
    assert_eq!(tenant.rules[0].unit, Some(Unit::Hour));

    let reference = api.resolve(&[("remote_address", "10.0.0.1")]).unwrap();
    assert!(reference.rules[0].reference);
    let RuleLimit::Limited(limit) = &reference.rules[0].limit else {
        panic!()
    };
    assert_eq!(limit.algorithm(), Algorithm::FixedWindow);
    assert!(
        limit.count_rejected(),
        "the reference counts hits over the limit"
    );
}

#[test]
fn wildcards_are_tried_in_config_order_after_the_exact_value() {
    let d = spillway_policy::parse(
        "w.yaml",
        "
domain: w
descriptors:
  - key: path
    value: /api/v1
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: path
    value: /api/*
    rate_limit: { unit: second, requests_per_unit: 2 }
  - key: path
    value: /api/v*
    rate_limit: { unit: second, requests_per_unit: 3 }
  - key: path
    value: /a*b*c
    rate_limit: { unit: second, requests_per_unit: 4 }
  - key: path
    rate_limit: { unit: second, requests_per_unit: 5 }
",
    )
    .unwrap();
    let n = |v: &str| d.resolve(&[("path", v)]).unwrap().rules[0].requests_per_unit;
    assert_eq!(n("/api/v1"), 1);
    assert_eq!(n("/api/v2"), 2, "the first wildcard in config order wins");
    assert_eq!(n("/aXbYc"), 4);
    assert_eq!(
        n("/aXbYcZ"),
        5,
        "anchored at the end: falls back to the key-only default"
    );
    assert_eq!(n(""), 5);
}

/// `trace` says how `resolve` matched: each entry's node and by which rule (exact,
/// wildcard, any value), and when nothing matched, why and what exists there.
#[test]
fn a_trace_says_how_each_entry_matched_or_why_none_did() {
    use spillway_policy::{How, Unmatched};
    let d = example("envoy/rl.yaml");
    let how = |entries: &[(&str, &str)]| -> Vec<(String, How)> {
        let t = d.trace(entries);
        assert_eq!(t.matched.is_some(), d.resolve(entries).is_some());
        t.steps.into_iter().map(|s| (s.node, s.how)).collect()
    };
    assert_eq!(
        how(&[("foo", "x"), ("bar", "banned")]),
        [
            ("foo".to_owned(), How::Key),
            ("bar_banned".to_owned(), How::Exact)
        ]
    );
    assert_eq!(
        how(&[("source_cluster", "proxy"), ("destination_cluster", "mock")])[0],
        ("source_cluster_proxy".to_owned(), How::Exact)
    );

    let t = d.trace(&[("nope", "x")]);
    let Some(Unmatched::NoNode {
        entry: 0, existing, ..
    }) = &t.unmatched
    else {
        panic!("{:?}", t.unmatched)
    };
    assert!(existing.contains(&"foo".to_owned()), "{existing:?}");
    let typo = d.trace(&[("fooo", "x")]).unmatched.unwrap().to_string();
    assert!(typo.contains("the closest is `foo`"), "{typo}");
    assert!(
        t.unmatched
            .as_ref()
            .unwrap()
            .to_string()
            .contains("the nodes there are")
    );
    assert_eq!(
        d.trace(&[("source_cluster", "proxy")]).unmatched,
        Some(Unmatched::NoRules { entry: 0 })
    );
    assert_eq!(
        d.trace(&[("foo", "x"), ("bar", "y"), ("deeper", "z")])
            .unmatched,
        Some(Unmatched::PathEnds { entry: 1, more: 1 })
    );
    assert_eq!(
        d.trace::<&str, &str>(&[]).unmatched,
        Some(Unmatched::NoEntries)
    );

    let w = spillway_policy::parse(
        "w.yaml",
        "domain: w\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: { unit: second, requests_per_unit: 2 }\n",
    )
    .unwrap();
    let t = w.trace(&[("path", "/api/v2")]);
    assert_eq!(t.steps[0].node, "path_/api/*");
    assert_eq!(t.steps[0].how, How::Wildcard);
}
