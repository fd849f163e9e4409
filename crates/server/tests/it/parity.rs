//! The reference service's settings and config shapes a drop-in must honour (issue #18),
//! each reproduced over gRPC (and `/json` where it applies), on memory and on Redis.

use crate::support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use serde_json::json;
use support::{Backing, Server, backings};

mod deny_cache;

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
                settings.store.key_prefix = "east_".into();
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
            let (_, keys) = redis_keys(url, "test:parity-prefix:*").await;
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
                settings.rules.merge_domains = true;
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

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: once one descriptor of a request is over
/// its limit, the request's other descriptors are not charged (the reference adds 0 to
/// them and reports their count as it stands); the one over is charged. A shadow rule
/// over its limit stops them too, as in the reference. Without the setting every
/// counter is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_increment_when_over_limit_charges_only_the_limits_over() {
    let yaml = "domain: stop\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n  - key: tenant\n    rate_limit: { unit: minute, requests_per_unit: 10 }\n  - key: trial\n    shadow_mode: true\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    let both = |user: &str, tenant: &str| {
        support::request("stop", &[&[("user", user)], &[("tenant", tenant)]])
    };
    // On Cluster the descriptors are in different slots: a look first, then the charge.
    let cluster = Backing::Redis(spillway_testkit::redis::cluster_url());
    for backing in backings().into_iter().chain([cluster]) {
        for stop in [true, false] {
            let s = Server::start_with(
                "parity-stop",
                &[("stop.yaml", yaml)],
                backing.clone(),
                |settings| settings.service.stop_increment_when_over_limit = stop,
            )
            .await;
            let mut seen = Vec::new();
            for _ in 0..5 {
                let r = s.ask(both("u1", "t1")).await;
                seen.push((
                    r.overall_code,
                    r.statuses[0].limit_remaining,
                    r.statuses[1].limit_remaining,
                ));
            }
            let over = Code::OverLimit as i32;
            let expected = if stop {
                // The tenant keeps 8: the requests the user limit denied cost it nothing.
                vec![
                    (OK, 1, 9),
                    (OK, 0, 8),
                    (over, 0, 8),
                    (over, 0, 8),
                    (over, 0, 8),
                ]
            } else {
                vec![
                    (OK, 1, 9),
                    (OK, 0, 8),
                    (over, 0, 7),
                    (over, 0, 6),
                    (over, 0, 5),
                ]
            };
            assert_eq!(seen, expected, "{backing:?} stop={stop}");

            // The user counter was charged for its denials: a look (hits 0) says over.
            let mut look = support::request("stop", &[&[("user", "u1")]]);
            look.descriptors[0].hits_addend =
                Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
            assert_eq!(s.ask(look).await.overall_code, over, "{backing:?}");

            // A shadow rule over its limit answers OK, and with the setting it stops
            // the tenant's counting as well.
            let trial = |n: &str| support::request("stop", &[&[("trial", n)], &[("tenant", "t2")]]);
            let first = s.ask(trial("x")).await;
            let second = s.ask(trial("x")).await;
            assert_eq!(
                (second.overall_code, second.statuses[0].code),
                (OK, OK),
                "{backing:?}"
            );
            assert_eq!(
                (
                    first.statuses[1].limit_remaining,
                    second.statuses[1].limit_remaining
                ),
                (9, if stop { 9 } else { 8 }),
                "{backing:?} stop={stop}"
            );

            // `/json` answers the same way.
            let (status, body) = s
                .post(
                    "/json",
                    &json!({ "domain": "stop", "descriptors": [
                        { "entries": [{ "key": "user", "value": "u1" }] },
                        { "entries": [{ "key": "tenant", "value": "t1" }] },
                    ] }),
                )
                .await;
            assert_eq!(status, 429, "{body}");
            assert_eq!(
                body["statuses"][1]["limitRemaining"],
                json!(if stop { 8 } else { 4 }),
                "{backing:?} stop={stop}: {body}"
            );
        }
    }
}

/// `RESPONSE_DYNAMIC_METADATA`: the response carries the domain, each descriptor's
/// entries (and hits addend, limit override), the request's hits addend when not 0,
/// and the `metadata` of the descriptors not over their limit, merged with the first
/// value winning and maps merging; over gRPC as a Struct and on `/json` as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_dynamic_metadata_carries_the_passing_descriptors_metadata() {
    let yaml = r#"domain: meta
descriptors:
  - key: service
    value: gold
    metadata: { name: gold, route: { cluster: big, weight: 3 } }
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: service
    value: silver
    metadata: { name: silver, route: { cluster: small, zone: b } }
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: service
    value: free
    metadata: { name: free }
    rate_limit: { unlimited: true }
"#;
    for backing in backings() {
        let s = Server::start_with(
            "parity-meta",
            &[("meta.yaml", yaml)],
            backing.clone(),
            |settings| settings.service.dynamic_metadata = true,
        )
        .await;
        let req = support::request(
            "meta",
            &[
                &[("service", "silver")],
                &[("service", "gold")],
                &[("service", "free")],
            ],
        );
        let first = s.ask(req.clone()).await;
        let metadata = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
            let s = r.dynamic_metadata.as_ref().expect("dynamic metadata");
            let mut m = serde_json::Map::new();
            for (k, v) in &s.fields {
                m.insert(k.clone(), pb_json(v));
            }
            serde_json::Value::Object(m)
        };
        let entries = json!([
            { "entries": ["service=silver"] },
            { "entries": ["service=gold"] },
            { "entries": ["service=free"] },
        ]);
        assert_eq!(
            metadata(&first),
            json!({
                "domain": "meta",
                "descriptors": entries,
                "metadata": {
                    "name": "silver",
                    "route": { "cluster": "small", "zone": "b", "weight": 3 },
                },
            }),
            "{backing:?}: silver first wins, the routes merge, unlimited adds nothing"
        );
        // Silver is now over its limit: only gold's metadata is left.
        let mut again = req.clone();
        again.hits_addend = 2;
        let second = s.ask(again).await;
        assert_eq!(second.statuses[0].code, Code::OverLimit as i32);
        assert_eq!(
            metadata(&second),
            json!({
                "domain": "meta",
                "descriptors": entries,
                "hitsAddend": 2,
                "metadata": { "name": "gold", "route": { "cluster": "big", "weight": 3 } },
            }),
            "{backing:?}"
        );
        let (status, body) = s
            .post(
                "/json",
                &json!({ "domain": "meta", "descriptors": [
                    { "entries": [{ "key": "service", "value": "gold" }], "hitsAddend": 1 },
                ] }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["dynamicMetadata"],
            json!({
                "domain": "meta",
                "descriptors": [{ "entries": ["service=gold"], "hitsAddend": 1 }],
                "metadata": { "name": "gold", "route": { "cluster": "big", "weight": 3 } },
            }),
            "{backing:?}: {body}"
        );
    }
    // Off by default: no metadata at all.
    let s = Server::start("parity-meta-off", &[("meta.yaml", yaml)], Backing::Memory).await;
    let r = s.should("meta", &[("service", "gold")]).await;
    assert!(r.dynamic_metadata.is_none());
}

fn pb_json(v: &envoy_types::pb::google::protobuf::Value) -> serde_json::Value {
    use envoy_types::pb::google::protobuf::value::Kind;
    match v.kind.as_ref().unwrap() {
        Kind::NullValue(_) => serde_json::Value::Null,
        Kind::BoolValue(b) => json!(b),
        Kind::NumberValue(n) => json!(*n as i64),
        Kind::StringValue(s) => json!(s),
        Kind::ListValue(l) => serde_json::Value::Array(l.values.iter().map(pb_json).collect()),
        Kind::StructValue(s) => serde_json::Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), pb_json(v)))
                .collect(),
        ),
    }
}

/// A connection to the Redis at `url`, and its keys that match `pattern`.
async fn redis_keys(url: &str, pattern: &str) -> (redis::aio::MultiplexedConnection, Vec<String>) {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut c)
        .await
        .unwrap();
    (c, keys)
}
