//! Keys and patterns as text: an override's key, the escaping that keeps keys apart,
//! and the reference's wildcard match.

use std::fmt::Write as _;

use spillway_core::Key;

use super::Domain;

/// The counter key of a limit override: the domain and every entry as given, a group
/// of its own. Fails only past [`MAX_KEY_LEN`](spillway_core::MAX_KEY_LEN).
pub fn override_key<K: AsRef<str>, V: AsRef<str>>(
    domain: &Domain,
    entries: &[(K, V)],
) -> Result<Key, spillway_core::Error> {
    let mut key = String::with_capacity(64);
    key.push_str(&domain.key_root);
    for (k, v) in entries {
        key.push('|');
        escape_into(&mut key, k.as_ref());
        key.push('=');
        escape_into(&mut key, v.as_ref());
    }
    key.push('!');
    Key::new(key)
}

/// Appends `s` with the key's separators (`| = : # ! %`) and braces percent-escaped,
/// so that the joined key is unambiguous whatever the entries hold.
pub fn escape_into(out: &mut String, s: &str) {
    const SPECIAL: [u8; 8] = *b"|=:#!%{}";
    // The separators are ASCII: the text between two of them is copied whole.
    let mut from = 0;
    for (i, b) in s.bytes().enumerate() {
        if SPECIAL.contains(&b) {
            out.push_str(&s[from..i]);
            let _ = write!(out, "%{b:02X}");
            from = i + 1;
        }
    }
    out.push_str(&s[from..]);
}

/// The reference's wildcard match: every `*` matches zero or more characters, and the
/// pattern is anchored at both ends (`bar*b` matches `barb` and `bar123b`, not `bara`).
pub fn wildcard_match(pattern: &str, s: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = s.strip_prefix(first) else {
        return false;
    };
    let mut parts = parts.peekable();
    if parts.peek().is_none() {
        return rest.is_empty(); // no `*` at all: an exact match
    }
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PolicySet;

    #[test]
    fn wildcards_are_anchored_and_match_zero_or_more() {
        for (pattern, s, expected) in [
            ("bar*b", "barb", true),
            ("bar*b", "bar123b", true),
            ("bar*b", "bara", false),
            ("bar*b", "xbarb", false),
            ("foo*bar*baz", "foobarbaz", true),
            ("foo*bar*baz", "foo1bar2baz", true),
            ("foo*bar*baz", "foobaz", false),
            ("key_foo*", "key_foo", true),
            ("key_foo*", "key_foobar", true),
            ("key_foo*", "key_fo", false),
            ("*", "", true),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("exact", "exact", true),
            ("exact", "exact2", false),
        ] {
            assert_eq!(wildcard_match(pattern, s), expected, "{pattern} vs {s}");
        }
    }

    #[test]
    fn escaping_keeps_keys_apart() {
        // Without escaping, these two descriptors would join to the same key.
        let d = crate::parse("d.yaml", "domain: d\ndescriptors: []\n").unwrap();
        let a = override_key(&d, &[("a", "b|c=d")]).unwrap();
        let b = override_key(&d, &[("a", "b"), ("c", "d")]).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn a_key_prefix_puts_every_key_of_the_set_apart() {
        let yaml = "domain: d|x\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
        let live = crate::assemble([crate::parse("d.yaml", yaml).unwrap()]).unwrap();
        let candidate = crate::assemble([crate::parse("d.yaml", yaml).unwrap()])
            .unwrap()
            .with_key_prefix("~candidate|");
        let key = |set: &PolicySet| {
            let d = set.domain("d|x").unwrap();
            let m = d.resolve(&[("k", "v")]).unwrap();
            (
                m.key(&m.rules[0]).unwrap(),
                override_key(d, &[("k", "v")]).unwrap(),
            )
        };
        let (live_key, live_override) = key(&live);
        let (key, overridden) = key(&candidate);
        // The domain's own `|` is escaped; the prefix is written as given.
        assert_eq!(live_key.as_str(), "d%7Cx|k=v");
        assert_eq!(key.as_str(), "~candidate|d%7Cx|k=v");
        assert_eq!(key.group(), format!("~candidate|{}", live_key.group()));
        assert_eq!(
            overridden.as_str(),
            format!("~candidate|{}", live_override.as_str())
        );
    }
}
