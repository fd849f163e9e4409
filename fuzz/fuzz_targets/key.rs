//! Key encoding: two different keys never share a Redis key, and the key's hash tag,
//! by Redis's own rule, is the key's (escaped) group, so neither the prefix, the
//! member nor the limit's suffix can move a key to another slot. Two different
//! descriptor paths never share a counter key.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use spillway_core::{Algorithm, Key, Limit, Timestamp};

/// Redis's hash-tag rule: from the first `{` to the first `}` after it, if not empty.
fn tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

fuzz_target!(|input: (
    String,
    String,
    String,
    Vec<(String, String)>,
    Vec<(String, String)>
)| {
    let (a, b, member, path_a, path_b) = input;
    let limit = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(60)).expect("a limit");
    let escaped = |s: &str| {
        s.replace('%', "%25")
            .replace('{', "%7B")
            .replace('}', "%7D")
    };
    // Keys of their own, and members of a group: `b` with and without `member`.
    let keys = [Key::new(&a), Key::new(&b), Key::grouped(&b, &member)];
    let keys: Vec<Key> = keys.into_iter().filter_map(Result::ok).collect();
    for x in &keys {
        let rx = spillway_redis::redis_key("p:", x, &limit, Timestamp::from_secs(0));
        let expected = escaped(x.group());
        assert_eq!(tag(&rx), Some(expected.as_str()), "{x:?} -> {rx:?}");
        assert!(rx.starts_with("p:{"), "{rx:?}");
        for y in &keys {
            let ry = spillway_redis::redis_key("p:", y, &limit, Timestamp::from_secs(0));
            assert_eq!(x == y, rx == ry, "{x:?} {y:?} -> {rx:?} {ry:?}");
        }
    }
    let domain =
        spillway_policy::parse("d.yaml", "domain: d\ndescriptors: []\n").expect("a domain");
    if let (Ok(oa), Ok(ob)) = (
        spillway_policy::override_key(&domain, &path_a),
        spillway_policy::override_key(&domain, &path_b),
    ) {
        assert_eq!(
            path_a == path_b,
            oa == ob,
            "{path_a:?} {path_b:?} -> {oa:?}"
        );
    }
});
