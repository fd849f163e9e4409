//! Hot reload: good → bad → good. A bad file is refused with its error exported, the
//! last good policies keep serving, and counters survive every reload.

use crate::support;

use serde_json::json;
use support::{Backing, Server};

fn policy(limit: u32) -> String {
    format!(
        "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: minute, requests_per_unit: {limit} }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_then_bad_then_good() {
    let s = Server::start("reload", &[("r.yaml", &policy(3))], Backing::Memory).await;
    let hit = || {
        s.check(json!({ "domain": "r", "descriptors": [{ "entries": [{ "key": "k", "value": "v" }] }] }))
    };
    assert_eq!(hit().await.2["descriptors"][0]["remaining"], 2);

    let bad = s
        .rewrite(
            "r.yaml",
            "domain: r\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight }\n",
        )
        .await;
    let error = bad.error.expect("the bad file was refused");
    assert!(
        error.contains(
            "r.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'"
        ),
        "{error}"
    );
    let config: serde_json::Value = serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
    assert!(
        config["last_load_error"]
            .as_str()
            .unwrap()
            .contains("fortnight")
    );
    let metrics = s.get_text("/metrics").await;
    assert!(
        metrics.contains("spillway_config_loads_total{result=\"error\"}"),
        "{metrics}"
    );
    // Still serving the last good policy, with its counter.
    assert_eq!(hit().await.2["descriptors"][0]["remaining"], 1);

    let good = s.rewrite("r.yaml", &policy(5)).await;
    assert_eq!(good.error, None);
    // The new limit applies, and the two hits already counted are still counted.
    let (_, _, body) = hit().await;
    assert_eq!(body["descriptors"][0]["rule"]["limit"], 5);
    assert_eq!(body["descriptors"][0]["remaining"], 2);
    s.running.stop().await;
}

/// A rule keeps its counters while it is loaded (registered on its first decision): a
/// reload makes new rules, whose counts go on where the old ones' left off under the
/// same labels, and a rule renamed by the reload counts under its new labels only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_counts_and_a_renamed_rule_counts_under_its_new_labels() {
    let policy = |name: &str| {
        format!(
            "domain: reload\ndescriptors:\n  - key: user\n    limits: [{{ name: {name}, \
             limit: 100, window: 1h }}]\n"
        )
    };
    let s = Server::start(
        "metrics-reload",
        &[("r.yaml", &policy("a"))],
        Backing::Memory,
    )
    .await;
    let hit = || {
        s.check(json!({ "domain": "reload", "descriptors": [
            { "entries": [{ "key": "user", "value": "u" }] }] }))
    };
    let count = |text: &str, limit: &str| -> Option<u64> {
        let series = format!(
            r##"spillway_decisions_total{{domain="reload",rule="user",limit="#{limit}",outcome="ok"}} "##
        );
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .map(|n| n.parse().unwrap())
    };
    for _ in 0..3 {
        hit().await;
    }
    assert_eq!(count(&s.get_text("/metrics").await, "a"), Some(3));
    // The same rule, loaded again (a comment changes the file): the count goes on.
    let loaded = s
        .rewrite("r.yaml", &format!("# again\n{}", policy("a")))
        .await;
    assert_eq!(loaded.error, None);
    hit().await;
    assert_eq!(count(&s.get_text("/metrics").await, "a"), Some(4));
    // Renamed: its decisions count under the new name, the old series stays where it was.
    let loaded = s.rewrite("r.yaml", &policy("b")).await;
    assert_eq!(loaded.error, None);
    hit().await;
    hit().await;
    let text = s.get_text("/metrics").await;
    assert_eq!(count(&text, "a"), Some(4), "{text}");
    assert_eq!(count(&text, "b"), Some(2), "{text}");
}
