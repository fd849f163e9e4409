//! `shares` rules in policy files: a tree's children, priorities and reserve read and
//! checked, a descriptor that ends with its priority matched at the child's node, and
//! the member a request brings (an unlisted child is `*`, an unknown priority the
//! lowest).

use spillway_policy::{Domain, RuleLimit};

fn example() -> Domain {
    let path = format!(
        "{}/../../examples/policies/org.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    spillway_policy::parse(&path, &std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn error(limit: &str) -> String {
    let yaml = format!(
        "domain: d\ndescriptors:\n  - key: org\n    descriptors:\n      - key: team\n        limits:\n          - {limit}\n"
    );
    match spillway_policy::parse("p.yaml", &yaml) {
        Ok(_) => panic!("loaded, but should not have:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_example_tree_loads_and_says_what_it_is() {
    let d = example();
    let m = d.resolve(&[("org", "acme"), ("team", "search")]).unwrap();
    let rule = &m.rules[0];
    assert!(rule.shares() && rule.takes_member());
    let RuleLimit::Limited(limit) = &rule.limit else {
        panic!("{rule}")
    };
    let children: Vec<&str> = limit
        .shares()
        .unwrap()
        .children()
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(children, ["*", "ingest", "search"]);
    assert_eq!(
        rule.to_string(),
        "org-shares: 1000 per 1s (shares) over * 0..200, ingest 300..800 w2 burst 20, \
         search 300..800 burst 20 waiting up to 200ms by tier: interactive > batch"
    );
}

/// The tree is keyed per organisation, whichever team asks and at whatever priority:
/// one state, every team's entries in it.
#[test]
fn a_trailing_priority_is_read_not_matched_and_the_tree_is_one_key_per_org() {
    let d = example();
    let plain = d.resolve(&[("org", "acme"), ("team", "search")]).unwrap();
    let tiered = d
        .resolve(&[("org", "acme"), ("team", "ingest"), ("tier", "batch")])
        .unwrap();
    let (a, b) = (&plain.rules[0], &tiered.rules[0]);
    assert_eq!(plain.key(a).unwrap(), tiered.key(b).unwrap());
    assert_eq!((plain.member, plain.priority), (1, None));
    assert_eq!((tiered.member, tiered.priority), (1, Some(2)));
    let other = d
        .resolve(&[("org", "initech"), ("team", "search")])
        .unwrap();
    assert_ne!(plain.key(a).unwrap(), other.key(&other.rules[0]).unwrap());
    // An entry after the team that is not the priority matches nothing, as the
    // reference's tree would.
    assert!(
        d.resolve(&[("org", "acme"), ("team", "search"), ("route", "x")])
            .is_none()
    );
}

#[test]
fn members_name_a_listed_child_or_star_and_a_priority_or_the_lowest() {
    let d = example();
    let rule = &d
        .resolve(&[("org", "a"), ("team", "search")])
        .unwrap()
        .rules[0];
    assert_eq!(rule.share_member("search", Some("interactive")), b"0search");
    assert_eq!(rule.share_member("search", Some("batch")), b"1search");
    assert_eq!(rule.share_of_member("1search"), ("search", Some("batch")));
    // Unknown or missing priority: the lowest, never a promotion.
    assert_eq!(rule.share_member("search", Some("urgent")), b"1search");
    assert_eq!(rule.share_member("search", None), b"1search");
    // An unlisted team, of any length, is `*`.
    assert_eq!(rule.share_member("marketing", None), b"1*");
    assert_eq!(
        rule.share_member(&"x".repeat(4096), Some("interactive")),
        b"0*"
    );
}

#[test]
fn trees_that_cannot_keep_their_promises_are_refused_with_the_field() {
    let shares = "{algorithm: shares, limit: 100, window: 1s";
    let cases = [
        (
            format!("{shares}, children: {{a: {{rate: 60}}, b: {{rate: 50}}}}}}"),
            "limits[0]: the children's rates add up to 110",
        ),
        (
            format!("{shares}, children: {{a: {{rate: 60, ceil: 50}}}}}}"),
            "limits[0].children: child `a`: ceil 50 is below its rate 60",
        ),
        (
            format!("{shares}, children: {{a: {{rate: 6, weight: 0}}}}}}"),
            "limits[0].children: child `a`: weight 0",
        ),
        (
            format!("{shares}, priority: tier}}"),
            "limits[0].priority: set priority (the descriptor entry naming it) and priorities",
        ),
        (
            format!("{shares}, priority: tier, priorities: [a, a]}}"),
            "limits[0].priorities: priority `a` is listed twice",
        ),
        (
            format!("{shares}, reserve: 1.5}}"),
            "limits[0].reserve: reserve 1.5 is not between 0 and 1",
        ),
        (
            format!("{shares}, metered: true}}"),
            "limits[0].metered: a shares limit decides guaranteed or borrowed",
        ),
        (
            "{algorithm: gcra, limit: 10, window: 1s, children: {a: {rate: 1}}}".into(),
            "limits[0].children: children applies to shares, not gcra",
        ),
        (
            format!("{shares}, children: {{a: {{rate: 1, bogus: 2}}}}}}"),
            "unknown field `bogus`",
        ),
    ];
    for (limit, want) in cases {
        let got = error(&limit);
        assert!(got.contains(want), "{limit}\nwant: {want}\ngot:  {got}");
    }
}
