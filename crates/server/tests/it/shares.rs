//! `shares` rules through the service: a descriptor names its child (the node's entry)
//! and may end with its priority; borrowers are admitted up to their priority's band
//! of the parent, a guarantee is honoured past them, and the answer, `explain` and
//! the metrics say who was admitted as what. On the memory store and on Redis, over
//! HTTP and gRPC, on the manual clock.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use serde_json::json;

use crate::support::{self, Server};

/// A parent of 10 a second, burst 10. `gold` is guaranteed 4 a second (burst 4);
/// `free` and `bulk` borrow only (ceiling 10, burst 3). With the guaranteed burst kept
/// free, borrowers may fill 6 of the parent's 10: interactive ones up to 6, batch ones
/// (reserve 0.2 a level) up to 4.8.
const POLICY: &str = "domain: s
descriptors:
  - key: org
    descriptors:
      - key: team
        limits:
          - name: org
            algorithm: shares
            limit: 10
            window: 1s
            burst: 10
            children:
              gold: { rate: 4, ceil: 10, burst: 4 }
              free: { rate: 0, ceil: 10, burst: 3 }
              bulk: { rate: 0, ceil: 10, burst: 3 }
            priority: tier
            priorities: [interactive, batch]
";

fn body(team: &str, tier: Option<&str>) -> serde_json::Value {
    body_in("s", team, tier)
}

fn body_in(domain: &str, team: &str, tier: Option<&str>) -> serde_json::Value {
    let mut entries = vec![
        json!({"key": "org", "value": "acme"}),
        json!({"key": "team", "value": team}),
    ];
    if let Some(tier) = tier {
        entries.push(json!({"key": "tier", "value": tier}));
    }
    json!({ "domain": domain, "descriptors": [{ "entries": entries }] })
}

#[tokio::test]
async fn batch_is_shed_first_and_a_guarantee_is_honoured_past_the_borrowers() {
    for (n, backing) in support::backings().into_iter().enumerate() {
        // A domain per store: the metrics' recorder is the process's.
        let domain = format!("s{n}");
        let policy = POLICY.replace("domain: s", &format!("domain: {domain}"));
        let s = Server::start("shares", &[("s.yaml", &policy)], backing.clone()).await;
        let body = |team: &str, tier: Option<&str>| body_in(&domain, team, tier);
        let admitted = |(status, _, answer): &(u16, _, serde_json::Value)| {
            assert!(matches!(status, 200 | 429), "{backing:?}: {answer}");
            *status == 200
        };
        // Batch borrowers: four fit under the batch band (three of free's, one of
        // bulk's), the fifth is shed although bulk's own ceiling has room.
        for n in 0..3 {
            assert!(
                admitted(&s.check(body("free", Some("batch"))).await),
                "batch {n}"
            );
        }
        assert!(admitted(&s.check(body("bulk", Some("batch"))).await));
        let shed = s.check(body("bulk", Some("batch"))).await;
        assert!(!admitted(&shed), "{backing:?}: {}", shed.2);
        // No tier, or one not listed, is the lowest (and free's ceiling is full).
        assert!(!admitted(&s.check(body("free", None)).await));
        assert!(!admitted(&s.check(body("free", Some("urgent"))).await));
        // Interactive, over gRPC: room above the batch band.
        let interactive = s
            .should(
                &domain,
                &[("org", "acme"), ("team", "bulk"), ("tier", "interactive")],
            )
            .await;
        assert_eq!(interactive.overall_code, Code::Ok as i32, "{backing:?}");
        // Gold's guarantee holds although borrowers filled their bands: four at once.
        for n in 0..4 {
            assert!(
                admitted(&s.check(body("gold", Some("batch"))).await),
                "gold {n}"
            );
        }
        // Past its guarantee gold borrows like any other, and there is no room left.
        let over = s.check(body("gold", Some("interactive"))).await;
        assert!(!admitted(&over), "{backing:?}: {}", over.2);
        // An unlisted team is `*`: a borrower with the parent's rate as its ceiling.
        assert!(!admitted(
            &s.check(body("marketing", Some("interactive"))).await
        ));

        // A second later the parent has paid back ten: batch borrows again.
        s.advance(std::time::Duration::from_secs(1));
        assert!(admitted(&s.check(body("free", Some("batch"))).await));

        // Free and bulk guarantee nothing: what they got they borrowed; gold's four
        // were its own.
        let metrics = s.get_text("/metrics").await;
        for line in [
            r#"child="free",priority="batch",outcome="refused"} 2"#,
            r#"child="free",priority="batch",outcome="borrowed"} 4"#,
            r#"child="bulk",priority="batch",outcome="refused"} 1"#,
            r#"child="bulk",priority="interactive",outcome="borrowed"} 1"#,
            r#"child="gold",priority="batch",outcome="guaranteed"} 4"#,
            r#"child="*",priority="interactive",outcome="refused"} 1"#,
        ] {
            assert!(
                metrics.contains(line),
                "{backing:?}: no {line} in\n{metrics}"
            );
        }

        let (status, explained) = s
            .post("/v1/explain", &body("nobody", Some("interactive")))
            .await;
        assert_eq!(status, 200, "{explained}");
        let share = &explained["descriptors"][0]["limits"][0]["share"];
        assert_eq!(share["child"], "*", "{explained}");
        assert_eq!(share["priority"], "interactive");
        assert_eq!(
            (share["rate"].as_u64(), share["ceil"].as_u64()),
            (Some(0), Some(10))
        );
    }
}

/// `explain` places a request in the tree, from the store's state (memory and Redis
/// alike): within its child's guarantee while that has room, then borrowing from what
/// the parent has left, then refused; with what the guarantee, the borrowing and the
/// parent have left at each step.
#[tokio::test]
async fn explain_places_a_request_guaranteed_borrowed_or_refused() {
    for (n, backing) in support::backings().into_iter().enumerate() {
        let domain = format!("place{n}");
        let policy = POLICY.replace("domain: s", &format!("domain: {domain}"));
        let s = Server::start("shares-place", &[("s.yaml", &policy)], backing.clone()).await;
        let gold = body_in(&domain, "gold", Some("interactive"));
        let place = |explained: serde_json::Value| {
            explained["descriptors"][0]["limits"][0]["share"]["place"].clone()
        };
        let free = body_in(&domain, "free", Some("interactive"));
        let (status, explained) = s.post("/v1/explain", &gold).await;
        assert_eq!(status, 200, "{explained}");
        let fresh = place(explained);
        assert_eq!(fresh["path"], "guaranteed", "{backing:?}: {fresh}");
        assert_eq!(fresh["guaranteed_left"], 4, "{fresh}");
        assert_eq!(fresh["parent_left"], 10, "{fresh}");
        // Free guarantees nothing: it borrows, at once, up to its burst (3) within
        // the interactive band (6 of the parent's 10, the guaranteed 4 kept free).
        let borrower = place(s.post("/v1/explain", &free).await.1);
        assert_eq!(borrower["path"], "borrowed", "{backing:?}: {borrower}");
        assert_eq!(borrower["wait_ms"], 0, "{borrower}");
        assert_eq!(borrower["guaranteed_left"], 0, "{borrower}");
        assert_eq!(borrower["borrowable_left"], 3, "{borrower}");
        // Gold spends its guarantee (and its burst: refused until it refills); the
        // parent has six left, of which the band lets free borrow two.
        for _ in 0..4 {
            assert_eq!(s.check(gold.clone()).await.0, 200);
        }
        let spent = place(s.post("/v1/explain", &gold).await.1);
        assert_eq!(spent["path"], "refused", "{backing:?}: {spent}");
        assert_eq!(spent["guaranteed_left"], 0, "{spent}");
        assert_eq!(spent["parent_left"], 6, "{spent}");
        assert_eq!(
            place(s.post("/v1/explain", &free).await.1)["borrowable_left"],
            2
        );
        let mut borrowed = 0;
        while s.check(free.clone()).await.0 == 200 {
            borrowed += 1;
            assert!(borrowed <= 10, "{backing:?}: borrowing never stopped");
        }
        assert_eq!(borrowed, 2, "{backing:?}");
        let refused = place(s.post("/v1/explain", &free).await.1);
        assert_eq!(refused["path"], "refused", "{backing:?}: {refused}");
        assert_eq!(refused["borrowable_left"], 0, "{refused}");
        assert!(refused["retry_after_ms"].as_u64().unwrap() > 0, "{refused}");
        // Nothing explained was charged: the same look again says the same.
        assert_eq!(place(s.post("/v1/explain", &free).await.1), refused);

        // With a max_wait (and a parent's burst with room for it), a borrower past its
        // burst is placed after its wait: its ceiling (10 a second) frees one each
        // 100 ms.
        let waiting = policy.replace("burst: 10\n", "burst: 20\n            max_wait: 100ms\n");
        assert_ne!(waiting, policy);
        let s = Server::start(
            "shares-place-wait",
            &[("s.yaml", &waiting)],
            backing.clone(),
        )
        .await;
        for _ in 0..3 {
            assert_eq!(s.check(free.clone()).await.0, 200);
        }
        let later = place(s.post("/v1/explain", &free).await.1);
        assert_eq!(later["path"], "borrowed", "{backing:?}: {later}");
        assert_eq!(later["wait_ms"], 100, "{later}");
    }
}

/// A shares rule takes no usage (a request is guaranteed or borrows before it goes):
/// a clear 400, nothing charged.
#[tokio::test]
async fn usage_on_a_shares_rule_is_refused_with_why() {
    let s = Server::start(
        "shares-usage",
        &[("s.yaml", POLICY)],
        support::Backing::Memory,
    )
    .await;
    let mut usage = body("gold", None);
    usage["usage"] = json!(true);
    let (status, _, answer) = s.check(usage).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("cannot take usage"), "{answer}");
}
