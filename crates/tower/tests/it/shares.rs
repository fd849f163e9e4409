//! A `shares` limit in the layer: the child from a header (`Rule::member`), the
//! priority from another (`Rule::priority`); batch borrowers are shed before
//! interactive ones and a guarantee holds past them. The manual clock stands still.

use crate::support;

use std::time::Duration;

use spillway_core::algorithm::shares::{Share, Shares};
use spillway_core::{Algorithm, Limit};
use spillway_tower::{KeyExtractor, Rule};
use support::{builder, serve_layer};

/// As the service's test (server/tests/it/shares.rs): a parent of 10 a second, gold
/// guaranteed 4 (burst 4), free and bulk borrowing (burst 3); batch borrowers may fill
/// 4.8 of the parent, interactive ones 6.
fn tree() -> Rule {
    let limit = Limit::builder(Algorithm::Shares, 10, Duration::from_secs(1))
        .burst(10)
        .shares(
            Shares::new()
                .child("gold", Share::new(4, 10).burst(4))
                .child("free", Share::new(0, 10).burst(3))
                .child("bulk", Share::new(0, 10).burst(3))
                .priorities(2, 200),
        )
        .build()
        .unwrap();
    Rule::new("org", limit, KeyExtractor::header("x-org"))
        .member(KeyExtractor::header("x-team"))
        .priority(KeyExtractor::header("x-tier"), &["interactive", "batch"])
}

#[tokio::test]
async fn batch_is_shed_first_and_a_guarantee_holds() {
    let client = serve_layer(builder().limit(tree()).build().unwrap()).await;
    let ask = |team: &'static str, tier: &'static str| {
        let client = &client;
        async move {
            client
                .status(
                    "/",
                    &[("x-org", "acme"), ("x-team", team), ("x-tier", tier)],
                )
                .await
        }
    };
    for _ in 0..3 {
        assert_eq!(ask("free", "batch").await, 200);
    }
    assert_eq!(ask("bulk", "batch").await, 200);
    assert_eq!(ask("bulk", "batch").await, 429, "past the batch band");
    assert_eq!(
        ask("bulk", "urgent").await,
        429,
        "an unknown tier is the lowest"
    );
    assert_eq!(
        ask("bulk", "interactive").await,
        200,
        "room above the batch band"
    );
    for n in 0..4 {
        assert_eq!(ask("gold", "batch").await, 200, "gold's guarantee, {n}");
    }
    assert_eq!(ask("gold", "interactive").await, 429);
    // No team is `*`: a borrower, and there is no room left.
    let none = client
        .status("/", &[("x-org", "acme"), ("x-tier", "interactive")])
        .await;
    assert_eq!(none, 429);
}

#[test]
fn a_shares_rule_needs_its_child_and_its_priorities() {
    let limit = |levels| {
        Limit::builder(Algorithm::Shares, 10, Duration::from_secs(1))
            .shares(Shares::new().priorities(levels, 200))
            .build()
            .unwrap()
    };
    let org = || KeyExtractor::header("x-org");
    let err = |rule: Rule| builder().limit(rule).build().err().unwrap().to_string();
    assert!(err(Rule::new("t", limit(1), org())).contains("needs `Rule::member`"));
    let two = Rule::new("t", limit(2), org()).member(KeyExtractor::header("x-team"));
    assert!(err(two.clone()).contains("needs `Rule::priority`"));
    let one_name = two.priority(KeyExtractor::header("x-tier"), &["only"]);
    assert!(err(one_name).contains("as many priorities"));
    let gcra = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(1)).unwrap();
    let wrong = Rule::new("t", gcra, org()).priority(KeyExtractor::header("x-tier"), &["a"]);
    assert!(err(wrong).contains("applies to shares limits only"));
}
