//! Keys and patterns as text: an override's key, the escaping that keeps keys apart,
//! and the reference's wildcard match.

use std::borrow::Cow;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

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
        value_into(&mut key, v.as_ref());
    }
    key.push('!');
    Key::new(key)
}

/// The bytes [`escape_into`] writes as `%XX`.
const SPECIAL: [u8; 8] = *b"|=:#!%{}";

/// Appends `s` with the key's separators (`| = : # ! %`) and braces percent-escaped,
/// so that the joined key is unambiguous whatever the entries hold.
pub fn escape_into(out: &mut String, s: &str) {
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

/// The longest value kept whole in a key or a member, in bytes (escaped, in a key).
/// Longer values come from clients (a 2 KB header, a token), and refusing them would
/// fail the call, which Envoy under `failure_mode_deny: false` turns into "admit":
/// they are kept as [`digested`] instead, so a key stays short whatever a client sends.
pub const MAX_VALUE_KEPT: usize = 64;

/// Bytes of a long value kept in front of its digest, for a reader of `explain`/`top`.
const DIGEST_PREFIX: usize = 16;

/// `v` as it goes into a key: escaped ([`escape_into`]) when that is at most
/// [`MAX_VALUE_KEPT`] bytes, else [`digested`] (its prefix escaped). A digested value
/// holds `%~`, which escaping never writes: no value kept whole reads as one digested.
pub fn value_into(out: &mut String, v: &str) {
    let special = v.bytes().filter(|b| SPECIAL.contains(b)).count();
    if v.len() + 2 * special <= MAX_VALUE_KEPT {
        return escape_into(out, v);
    }
    escape_into(out, prefix(v));
    out.push_str("%~");
    hex_digest_into(out, v);
}

/// `v` as a member (a `concurrency` hold's id, what a `distinct` rule counts): as it
/// is when at most [`MAX_VALUE_KEPT`] bytes and free of `%~`, else [`digested`]. Two
/// different values never give one member (a kept value has no `%~`; a digested one
/// has, and two digests agree only for the same value).
pub fn member_of(v: &str) -> Cow<'_, str> {
    if v.len() <= MAX_VALUE_KEPT && !v.contains("%~") {
        return Cow::Borrowed(v);
    }
    Cow::Owned(digested(v))
}

/// A long value as it is kept: its first 16 bytes (to a character's
/// end), `%~`, then the first 128 bits of its SHA-256 in hex: 2^64 work to find two
/// values that share one, never by accident.
pub fn digested(v: &str) -> String {
    let mut out = String::with_capacity(DIGEST_PREFIX + 2 + 32);
    out.push_str(prefix(v));
    out.push_str("%~");
    hex_digest_into(&mut out, v);
    out
}

fn prefix(v: &str) -> &str {
    let mut end = v.len().min(DIGEST_PREFIX);
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    &v[..end]
}

fn hex_digest_into(out: &mut String, v: &str) {
    let digest = Sha256::digest(v.as_bytes());
    for b in &digest[..16] {
        let _ = write!(out, "{b:02x}");
    }
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
    fn long_values_are_kept_as_a_prefix_and_a_digest() {
        let d = crate::parse("d.yaml", "domain: d\ndescriptors: []\n").unwrap();
        let long = "k".repeat(2_000);
        let mut other = long.clone();
        other.replace_range(1_999.., "j");
        let key = |v: &str| override_key(&d, &[("api_key", v)]).unwrap();
        assert!(key(&long).as_str().len() < 100, "{}", key(&long).as_str());
        assert!(key(&long).as_str().contains("=kkkkkkkkkkkkkkkk%~"));
        assert_ne!(key(&long), key(&other), "the last byte counts");
        assert_eq!(key(&long), key(&long.clone()));
        // A value kept whole never reads as a digested one.
        let digest = digested(&long);
        assert_ne!(key(&digest), key(&long));
        assert_ne!(member_of(&digest), member_of(&long));
        assert_eq!(member_of("req-1"), "req-1");
        assert_eq!(member_of(&long), digest.as_str());
        assert_ne!(member_of(&long), member_of(&other));
        // 64 bytes of separators escape to 192: digested, the key stays short.
        assert!(key(&"|".repeat(64)).as_str().len() < 100);
        assert_eq!(
            digested("é".repeat(40).as_str())
                .split("%~")
                .next()
                .unwrap(),
            "é".repeat(8)
        );
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
