//! The reference service's settings and config shapes a drop-in must honour (issue #18),
//! each reproduced over gRPC (and `/json` where it applies), on memory and on Redis.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use serde_json::json;
use support::{Backing, Server, backings};

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

/// `CACHE_KEY_PREFIX` is written before every counter key, so services with different
/// prefixes count apart in one Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_key_prefix_is_written_before_every_counter_key() {
    let yaml = "domain: pre\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";
    for backing in backings() {
        let s = Server::start_with(
            "parity-prefix",
            &[("pre.yaml", yaml)],
            backing.clone(),
            |settings| {
                settings.key_prefix = "east_".into();
            },
        )
        .await;
        let r = s.should("pre", &[("user", "u1")]).await;
        assert_eq!(r.statuses[0].limit_remaining, 4, "{backing:?}");
        let (status, x) = s
            .post(
                "/v1/explain",
                &json!({ "domain": "pre", "descriptors": [{ "entries": [{ "key": "user", "value": "u1" }] }] }),
            )
            .await;
        assert_eq!(status, 200, "{x}");
        let limit = &x["descriptors"][0]["limits"][0];
        assert_eq!(limit["key"], "east_pre|user=u1", "{x}");
        assert_eq!(
            limit["state"]["remaining"], 4,
            "the check counted under the prefix: {x}"
        );
        if let Backing::Redis(url) = &backing {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("test:parity-prefix:*")
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(!keys.is_empty(), "no key in Redis");
            assert!(
                keys.iter().all(|k| k.contains("{east_pre|user=u1}")),
                "{keys:?}"
            );
        }
    }
}

/// `MERGE_DOMAIN_CONFIG`: files that declare one domain make one domain; a descriptor
/// both declare is refused; without it, the second file's domain is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_domain_config_makes_one_domain_of_several_files() {
    let a = "domain: m\ndescriptors:\n  - key: x\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    let b = "domain: m\ndescriptors:\n  - key: y\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n";
    for backing in backings() {
        let s = Server::start_with(
            "parity-merge",
            &[("a.yaml", a), ("b.yaml", b)],
            backing.clone(),
            |settings| {
                settings.merge_domains = true;
            },
        )
        .await;
        let x = s.should("m", &[("x", "1")]).await;
        let y = s.should("m", &[("y", "1")]).await;
        assert_eq!(
            (x.statuses[0].limit_remaining, y.statuses[0].limit_remaining),
            (0, 1),
            "{backing:?}"
        );
        assert_eq!(
            s.should("m", &[("x", "1")]).await.overall_code,
            Code::OverLimit as i32
        );
    }
    let dir = support::tempdir("parity-merge-files");
    std::fs::write(dir.join("a.yaml"), a).unwrap();
    std::fs::write(dir.join("b.yaml"), b).unwrap();
    let merge = spillway_policy::LoadOptions {
        merge_domains: true,
    };
    let err = spillway_policy::load(&dir).unwrap_err().to_string();
    assert!(err.contains("duplicate domain 'm'"), "{err}");
    assert_eq!(
        spillway_policy::load_with(&dir, merge)
            .unwrap()
            .domain("m")
            .unwrap()
            .rule_count(),
        2
    );
    std::fs::write(dir.join("c.yaml"), a.replace("1 }", "5 }")).unwrap();
    let err = spillway_policy::load_with(&dir, merge)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("duplicate descriptor composite key 'x' in domain 'm'"),
        "{err}"
    );
}
