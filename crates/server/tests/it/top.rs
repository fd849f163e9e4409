//! `GET /v1/top?domain=D`: per rule, the keys denied most over the last minutes,
//! heaviest first, over a real socket.

use crate::support;

use serde_json::json;
use support::{Server, backings};

const POLICY: &str = "
domain: api
descriptors:
  - key: user
    limits:
      - { name: per-user, algorithm: fixed_window, limit: 1, window: 1h }
  - key: team
    mode: shadow
    limits:
      - { name: trial, algorithm: fixed_window, limit: 1, window: 1h }
";

fn user(u: &str) -> serde_json::Value {
    json!({ "domain": "api", "descriptors": [{ "entries": [{ "key": "user", "value": u }] }] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_denied_most_come_first_per_rule() {
    let s = Server::start("top", &[("api.yaml", POLICY)], backings()[0].clone()).await;
    for (u, n) in [("u-hot", 40), ("u2", 10), ("u3", 3), ("u4", 1)] {
        for _ in 0..n {
            s.check(user(u)).await;
        }
    }
    // A shadow rule's would-be denials are listed too.
    let team = json!({ "domain": "api", "descriptors": [{ "entries": [{ "key": "team", "value": "t1" }] }] });
    for _ in 0..3 {
        let (status, _, _) = s.check(team.clone()).await;
        assert_eq!(status, 200);
    }

    let top: serde_json::Value =
        serde_json::from_str(&s.get_text("/v1/top?domain=api").await).unwrap();
    assert_eq!(top["domain"], "api");
    let rules = top["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{top}");
    assert_eq!(
        rules[0]["rule"], "per-user",
        "the heaviest rule first: {top}"
    );
    let keys: Vec<(&str, u64)> = rules[0]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["key"].as_str().unwrap(), k["denied"].as_u64().unwrap()))
        .collect();
    let names: Vec<&str> = keys.iter().map(|k| k.0).collect();
    assert!(names[0].contains("user=u-hot"), "{keys:?}");
    // Exact while fewer keys than counters: the first of each was admitted.
    assert_eq!(
        keys.iter().map(|k| k.1).collect::<Vec<_>>(),
        [39, 9, 2],
        "{keys:?}"
    );
    assert_eq!(rules[1]["rule"], "trial");
    assert_eq!(rules[1]["keys"][0]["denied"], 2);

    let empty: serde_json::Value =
        serde_json::from_str(&s.get_text("/v1/top?domain=other").await).unwrap();
    assert_eq!(empty["rules"], json!([]));
    let r = s.http.get(s.url("/v1/top")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("domain"),
        "{body}"
    );
}
