//! The reference service's settings and config shapes a drop-in must honour (issue #18),
//! each reproduced over gRPC (and `/json` where it applies), on memory and on Redis.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use serde_json::json;
use support::{Server, backings};

const OK: i32 = Code::Ok as i32;

/// `descriptors:` with nothing after it (YAML null) is a domain without rules, as the
/// reference loads it: every request to it is OK, with no limit and nothing counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_descriptors_list_is_a_domain_without_rules() {
    let files = [
        ("empty.yaml", "domain: empty\ndescriptors:\n"),
        (
            "nested.yaml",
            "domain: nested\ndescriptors:\n  - key: a\n    descriptors:\n",
        ),
    ];
    for backing in backings() {
        let s = Server::start("parity-empty", &files, backing.clone()).await;
        for domain in ["empty", "nested"] {
            for _ in 0..3 {
                let r = s.should(domain, &[("a", "1")]).await;
                assert_eq!(r.overall_code, OK, "{backing:?} {domain}");
                assert_eq!(r.statuses.len(), 1);
                assert_eq!(r.statuses[0].code, OK);
                assert!(r.statuses[0].current_limit.is_none());
            }
            let (status, body) = s
                .post(
                    "/json",
                    &json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "a", "value": "1" }] }] }),
                )
                .await;
            assert_eq!(
                (status, &body["overallCode"]),
                (200, &json!("OK")),
                "{body}"
            );
        }
        let config: serde_json::Value =
            serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
        let domains = config["domains"].as_array().unwrap();
        assert_eq!(domains.len(), 2, "{config}");
        assert!(domains.iter().all(|d| d["rules"] == json!([])), "{config}");
    }
}
