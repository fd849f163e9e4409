//! Key encoding: two different identities never share a Redis key, and the key's hash
//! tag, by Redis's own rule, is the identity's tag or the whole (escaped) identity, so
//! the prefix and the limit's suffix can never move a key to another slot. Two
//! different descriptor paths never share a counter key.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use spillway_core::{Algorithm, Key, Limit};

/// Redis's hash-tag rule: from the first `{` to the first `}` after it, if not empty.
fn tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

fuzz_target!(
    |input: (String, String, Vec<(String, String)>, Vec<(String, String)>)| {
        let (a, b, path_a, path_b) = input;
        let limit = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(60)).expect("a limit");
        if let (Ok(ka), Ok(kb)) = (Key::new(&a), Key::new(&b)) {
            let (ra, rb) = (
                spillway_redis::redis_key("p:", &ka, &limit),
                spillway_redis::redis_key("p:", &kb, &limit),
            );
            assert_eq!(a == b, ra == rb, "{a:?} {b:?} -> {ra:?} {rb:?}");
            let escaped = |s: &str| {
                s.replace('%', "%25")
                    .replace('{', "%7B")
                    .replace('}', "%7D")
            };
            let expected = escaped(tag(&a).unwrap_or(&a));
            assert_eq!(tag(&ra), Some(expected.as_str()), "{a:?} -> {ra:?}");
            assert!(ra.starts_with("p:{"), "{ra:?}");
        }
        let (oa, ob) = (
            spillway_policy::override_key("d", &path_a),
            spillway_policy::override_key("d", &path_b),
        );
        assert_eq!(
            path_a == path_b,
            oa == ob,
            "{path_a:?} {path_b:?} -> {oa:?}"
        );
    }
);
