//! The keys `serve` writes to Redis: the descriptor once, a GCRA key under 100 bytes
//! (`cargo test -p spillway --release --test it -- --nocapture service_keys` prints the
//! table of their sizes that docs/performance.md quotes).

use std::path::Path;

use spillway_testkit::redis::RedisServer;

use super::{redis_cli, serve, terminate};
use crate::support::curl;

#[test]
fn service_keys_hold_the_descriptor_once_and_a_gcra_key_is_under_100_bytes() {
    let redis = RedisServer::start();
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let (mut child, http) = serve(&policies, &redis.url());

    // One request for each of examples/policies/api.yaml's descriptors: every algorithm.
    // An upload of 50 MB: a token bucket refilling 100 MB a minute holds 1 byte for
    // under a microsecond, and a state that is already idle is deleted, not written.
    // remote_address is 10 per second in a fixed window, and `burst` a GCRA of 10 per
    // second: their keys live about a second. So each request's keys are read right
    // after it (name and size), and the requests are sent again, round after round,
    // until all five keys have been seen alive: a busy machine's pause costs a round,
    // not the test.
    let requests = [
        (r#"[{"key":"api_key","value":"k1"}]"#, 1),
        (
            r#"[{"key":"api_key","value":"k1"},{"key":"route","value":"upload"}]"#,
            50_000_000,
        ),
        (r#"[{"key":"tenant","value":"t1"}]"#, 1),
        (r#"[{"key":"remote_address","value":"10.0.0.1"}]"#, 1),
    ];
    let mut seen = std::collections::BTreeMap::<String, u64>::new();
    for round in 0..20 {
        for (entries, cost) in requests {
            let body = format!(
                r#"{{"domain":"api","descriptors":[{{"entries":{entries},"cost":{cost}}}]}}"#
            );
            let answer = curl(http, "/v1/check", Some(&body));
            // A later round may find a second's limit spent: its key is alive then.
            assert!(
                answer.starts_with("200") || (round > 0 && answer.starts_with("429")),
                "{answer}"
            );
            for key in redis_cli(redis.port(), &["--scan"]).lines() {
                let bytes = redis_cli(redis.port(), &["MEMORY", "USAGE", key, "SAMPLES", "0"]);
                if let Ok(bytes) = bytes.trim().parse::<u64>() {
                    seen.entry(key.to_owned()).or_insert(bytes);
                }
            }
        }
        if seen.len() >= 5 {
            break;
        }
    }
    terminate(&child);
    assert!(child.wait().unwrap().success());

    let keys: Vec<&String> = seen.keys().collect();
    assert_eq!(keys.len(), 5, "{keys:?}");
    println!("| key | MEMORY USAGE bytes |\n|---|---|");
    for key in &keys {
        assert!(
            !key.contains("%7B"),
            "the descriptor is written twice: {key}"
        );
        let group = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
        assert_eq!(key.matches(group).count(), 1, "{key}");
        let bytes = seen[*key];
        println!("| `{key}` | {bytes} |");
        if key.contains(":gcra:") {
            assert!(bytes <= 100, "{key}: {bytes} bytes");
        }
    }
    assert!(
        seen.contains_key("spillway:{api|api_key=k1}#burst:gcra:1s"),
        "{keys:?}"
    );
}
