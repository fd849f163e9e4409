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
    for (entries, cost) in [
        (r#"[{"key":"api_key","value":"k1"}]"#, 1),
        (
            r#"[{"key":"api_key","value":"k1"},{"key":"route","value":"upload"}]"#,
            50_000_000,
        ),
        (r#"[{"key":"tenant","value":"t1"}]"#, 1),
    ] {
        let body =
            format!(r#"{{"domain":"api","descriptors":[{{"entries":{entries},"cost":{cost}}}]}}"#);
        let answer = curl(http, "/v1/check", Some(&body));
        assert!(answer.starts_with("200"), "{answer}");
    }
    // remote_address: 10 per second in a fixed window, whose key lives until its second
    // ends, which may be a moment after the request. Asked again until seen alive.
    let remote = r#"{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}"#;
    let (fixed, fixed_bytes) = (0..5)
        .find_map(|_| {
            let answer = curl(http, "/v1/check", Some(remote));
            assert!(answer.starts_with("200"), "{answer}");
            let key = redis_cli(redis.port(), &["--scan", "--pattern", "*remote_address*"]);
            let key = key.lines().next()?.to_owned();
            let bytes = redis_cli(redis.port(), &["MEMORY", "USAGE", &key, "SAMPLES", "0"]);
            Some((key, bytes.trim().parse::<u64>().ok()?))
        })
        .expect("the fixed window's key, alive once in five tries");
    terminate(&child);
    assert!(child.wait().unwrap().success());

    let mut keys: Vec<String> = redis_cli(redis.port(), &["--scan"])
        .lines()
        .filter(|k| *k != fixed)
        .map(str::to_owned)
        .collect();
    keys.push(fixed.clone());
    keys.sort();
    assert_eq!(keys.len(), 5, "{keys:?}");
    println!("| key | MEMORY USAGE bytes |\n|---|---|");
    for key in &keys {
        assert!(
            !key.contains("%7B"),
            "the descriptor is written twice: {key}"
        );
        let group = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
        assert_eq!(key.matches(group).count(), 1, "{key}");
        let bytes: u64 = if *key == fixed {
            fixed_bytes
        } else {
            redis_cli(redis.port(), &["MEMORY", "USAGE", key, "SAMPLES", "0"])
                .trim()
                .parse()
                .unwrap()
        };
        println!("| `{key}` | {bytes} |");
        if key.contains(":gcra:") {
            assert!(bytes <= 100, "{key}: {bytes} bytes");
        }
    }
    assert!(
        keys.contains(&"spillway:{api|api_key=k1}#burst:gcra:1s".to_owned()),
        "{keys:?}"
    );
}
