//! Hot reload: good → bad → good. A bad file is refused with its error exported, the
//! last good policies keep serving, and counters survive every reload.

mod support;

use serde_json::json;
use support::{Backing, Server};

fn policy(limit: u32) -> String {
    format!(
        "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: minute, requests_per_unit: {limit} }}\n"
    )
}

async fn write_and_wait(s: &Server, yaml: &str) -> spillway_server::LoadStatus {
    let mut changes = s.running.state.load_status.subscribe();
    let before = changes.borrow_and_update().generation;
    std::fs::write(s.dir.join("r.yaml"), yaml).unwrap();
    // The watcher reports the change; no sleeping on a guess of how long that takes.
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        changes.wait_for(|st| st.generation > before),
    )
    .await
    .expect("the watcher saw the change")
    .unwrap()
    .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_then_bad_then_good() {
    let s = Server::start("reload", &[("r.yaml", &policy(3))], Backing::Memory).await;
    let hit = || {
        s.check(json!({ "domain": "r", "descriptors": [{ "entries": [{ "key": "k", "value": "v" }] }] }))
    };
    assert_eq!(hit().await.2["descriptors"][0]["remaining"], 2);

    let bad = write_and_wait(
        &s,
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

    let good = write_and_wait(&s, &policy(5)).await;
    assert_eq!(good.error, None);
    // The new limit applies, and the two hits already counted are still counted.
    let (_, _, body) = hit().await;
    assert_eq!(body["descriptors"][0]["rule"]["limit"], 5);
    assert_eq!(body["descriptors"][0]["remaining"], 2);
    s.running.stop().await;
}
