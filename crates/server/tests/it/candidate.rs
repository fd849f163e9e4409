//! `--candidate-config`: a second policy set decided in shadow on the live traffic, on
//! counters of its own, answering nobody; its decisions and disagreements in /metrics,
//! its load (and load errors) in /v1/config.

use crate::support;

use serde_json::json;
use support::{Server, backings, tempdir};

const LIVE: &str = "
domain: cand
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: hour, requests_per_unit: 3 }
  - key: team
    rate_limit: { name: per-team, unit: hour, requests_per_unit: 1 }
";

const CANDIDATE: &str = "
domain: cand
descriptors:
  - key: user
    rate_limit: { name: per-user, unit: hour, requests_per_unit: 1 }
  - key: team
    rate_limit: { name: per-team, unit: hour, requests_per_unit: 5 }
";

fn body(key: &str, value: &str) -> serde_json::Value {
    json!({ "domain": "cand", "descriptors": [{ "entries": [{ "key": key, "value": value }] }] })
}

/// The value of the metric line holding every one of `parts`, once it reaches `want`
/// (candidate decisions run after the answers, on a thread that gets only idle CPU: on a
/// machine busy with the rest of the suite that can take a while, hence 30 s at most).
async fn metric(s: &Server, parts: &[&str], want: u64) -> u64 {
    let mut last = 0;
    for _ in 0..3000 {
        let text = s.get_text("/metrics").await;
        last = text
            .lines()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0);
        if last >= want {
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_is_decided_in_shadow_and_its_disagreements_are_counted() {
    // Metrics are one recorder per process: each backing adds to the last one's counts.
    for (n, backing) in (1..).zip(backings()) {
        let dir = tempdir(&format!("candidate-{n}"));
        std::fs::write(dir.join("cand.yaml"), CANDIDATE).unwrap();
        let s = Server::start_with(
            "candidate-live",
            &[("cand.yaml", LIVE)],
            backing.clone(),
            |settings| {
                settings.rules.candidate = Some(dir.clone());
            },
        )
        .await;
        // The candidate allows 1 per user where the live set allows 3: the answers are
        // the live set's, and on counters of its own the candidate would deny twice.
        for _ in 0..3 {
            let (status, _, answer) = s.check(body("user", &format!("u-{backing:?}"))).await;
            assert_eq!(status, 200, "{backing:?}: {answer}");
            assert_eq!(answer["descriptors"][0]["rule"]["limit"], 3);
        }
        // And the reverse for teams: live denies the second, the candidate would not.
        let team = body("team", &format!("t-{backing:?}"));
        assert_eq!(s.check(team.clone()).await.0, 200);
        assert_eq!(s.check(team).await.0, 429);

        let over = metric(
            &s,
            &[
                "spillway_candidate_decisions_total",
                "rule=\"user\"",
                "over_limit",
            ],
            2 * n,
        )
        .await;
        assert_eq!(over, 2 * n, "{backing:?}: candidate over-limit decisions");
        let would_deny = metric(
            &s,
            &["spillway_candidate_disagreements_total", "would_deny"],
            2 * n,
        )
        .await;
        assert_eq!(would_deny, 2 * n, "{backing:?}: would_deny");
        let would_admit = metric(
            &s,
            &["spillway_candidate_disagreements_total", "would_admit"],
            n,
        )
        .await;
        assert_eq!(would_admit, n, "{backing:?}: would_admit");

        let config: serde_json::Value =
            serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
        assert_eq!(
            config["candidate"]["domains"][0]["domain"], "cand",
            "{config}"
        );
        assert_eq!(config["candidate"]["last_load_error"], json!(null));
    }
}

/// A candidate that does not load never stops the service: /v1/config says why, the
/// live set answers, and a later good file is picked up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_candidate_is_reported_not_fatal() {
    let dir = tempdir("candidate-broken");
    std::fs::write(dir.join("cand.yaml"), "domain: [\n").unwrap();
    let s = Server::start_with(
        "candidate-broken-live",
        &[("cand.yaml", LIVE)],
        backings()[0].clone(),
        |settings| {
            settings.rules.candidate = Some(dir.clone());
        },
    )
    .await;
    assert_eq!(s.check(body("user", "u1")).await.0, 200);
    let config: serde_json::Value = serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
    let error = config["candidate"]["last_load_error"]
        .as_str()
        .unwrap_or("");
    assert!(error.contains("cand.yaml"), "{config}");
    assert_eq!(config["candidate"]["domains"], json!([]));
    assert_eq!(
        config["last_load_error"],
        json!(null),
        "the live set is fine"
    );
}
