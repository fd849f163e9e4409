//! Redis key names: `<prefix>{<identity>}:<algorithm>:<window>`, e.g.
//! `spillway:{user:42}:gcra:60s`. Algorithms have short tags (`fw`, `sl`, `sw<precision>`,
//! `tb<limit>.<burst>`, `gcra`) and windows a compact unit (`60s`, `1500ms`, `7us`):
//! the name is most of a small state's bytes in Redis.
//!
//! The `{…}` hash tag wraps the identity, so every limit of one identity lands in one
//! Redis Cluster slot and a batch over them is one script call. An identity that holds
//! its own hash tag (`tenant:{acme}:user:7`, Redis's rule: the first `{`, up to the
//! first `}` after it, not empty) hashes by that tag instead, so identities that share a
//! tag can be limited together in one batch on Cluster:
//! `<prefix>{acme}tenant:%7Bacme%7D:user:7:gcra:60s`.
//!
//! No two (identity, shape) pairs give the same name: `%`, `{` and `}` in the
//! identity are percent-escaped, so the only braces are the tag's; the algorithm and
//! window, which contain no `:`, are the last two `:`-separated fields. The name holds
//! the limit's shape as `Limit::shape` defines it: algorithm, window, sliding-window
//! precision, token-bucket rate and burst, and not the
//! capacity of the counting algorithms or GCRA: changing their size keeps their counts.

use std::fmt::Write as _;

use spillway_core::{Algorithm, Key, Limit};

/// The Redis key holding `key`'s state for `limit`.
pub fn redis_key(prefix: &str, key: &Key, limit: &Limit) -> String {
    let identity = key.as_str();
    let mut out = String::with_capacity(prefix.len() + identity.len() + 32);
    out.push_str(prefix);
    out.push('{');
    match user_tag(identity) {
        Some(tag) => {
            escape(&mut out, tag);
            out.push('}');
            escape(&mut out, identity);
        }
        None => {
            escape(&mut out, identity);
            out.push('}');
        }
    }
    // Short tags: the key name is most of a small state's bytes in Redis.
    let _ = match limit.algorithm() {
        Algorithm::FixedWindow => write!(out, ":fw"),
        Algorithm::SlidingLog => write!(out, ":sl"),
        Algorithm::SlidingWindow { precision, .. } => write!(out, ":sw{precision}"),
        // A token bucket's level is in units of its rate: see `Limit::shape`.
        Algorithm::TokenBucket => write!(out, ":tb{}.{}", limit.limit(), limit.burst()),
        Algorithm::Gcra => write!(out, ":gcra"),
    };
    let w = limit.window_micros();
    let _ = if w.is_multiple_of(1_000_000) {
        write!(out, ":{}s", w / 1_000_000)
    } else if w.is_multiple_of(1_000) {
        write!(out, ":{}ms", w / 1_000)
    } else {
        write!(out, ":{w}us")
    };
    out
}

/// The identity's own hash tag, by Redis's rule.
fn user_tag(identity: &str) -> Option<&str> {
    let open = identity.find('{')?;
    let len = identity[open + 1..].find('}')?;
    (len > 0).then(|| &identity[open + 1..open + 1 + len])
}

fn escape(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

/// A prefix may not contain braces: Redis would take the hash tag from the prefix.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.contains(['{', '}']) {
        return Err(format!(
            "key prefix `{prefix}` contains a brace; Redis would hash every key by it"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::cluster_routing::Slot;
    use std::time::Duration;

    fn limit(a: Algorithm) -> Limit {
        Limit::new(a, 10, Duration::from_secs(60)).unwrap()
    }

    fn name(identity: &str, a: Algorithm) -> String {
        redis_key("rl:", &Key::new(identity).unwrap(), &limit(a))
    }

    #[test]
    fn names_hold_identity_algorithm_and_window() {
        assert_eq!(name("user:1", Algorithm::Gcra), "rl:{user:1}:gcra:60s");
        let sw = Algorithm::SlidingWindow {
            precision: 60,
            edge: Default::default(),
        };
        assert_eq!(name("user:1", sw), "rl:{user:1}:sw60:60s");
    }

    #[test]
    fn braces_and_percent_are_escaped() {
        assert_eq!(
            name("a}b%{", Algorithm::FixedWindow),
            "rl:{a%7Db%25%7B}:fw:60s"
        );
        // Without escaping, "a}:x" would hash by "a" and read like another identity.
        assert_ne!(name("a}:x", Algorithm::Gcra), name("a", Algorithm::Gcra));
    }

    #[test]
    fn a_user_tag_decides_the_slot() {
        let a = name("tenant:{acme}:user:1", Algorithm::Gcra);
        let b = name("tenant:{acme}:user:2", Algorithm::SlidingLog);
        assert_eq!(a, "rl:{acme}tenant:%7Bacme%7D:user:1:gcra:60s");
        assert_eq!(Slot::for_key(&a), Slot::for_key(&b));
        assert_eq!(Slot::for_key(&a), Slot::for_key("{acme}"));
        // An empty tag is no tag, as in Redis.
        assert_eq!(name("x{}y", Algorithm::Gcra), "rl:{x%7B%7Dy}:gcra:60s");
    }

    #[test]
    fn every_limit_of_one_identity_shares_a_slot() {
        let slots: Vec<_> = Algorithm::ALL
            .iter()
            .map(|a| Slot::for_key(name("ip:10.0.0.1", *a)))
            .collect();
        assert!(slots.windows(2).all(|w| w[0] == w[1]));
    }

    #[test]
    fn distinct_identities_never_collide() {
        // Pairs that naive joining or unescaped braces would confuse.
        let ids = [
            "a", "a:", ":a", "a}", "a{", "{a}", "a%7D", "a%", "{a}a", "a{a}", "x{a}", "{a}:x",
            "%7Ba%7D",
        ];
        let mut seen = std::collections::HashSet::new();
        for id in ids {
            for a in Algorithm::ALL {
                assert!(seen.insert(name(id, a)), "collision for {id:?}");
            }
        }
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(check_prefix("spillway:").is_ok());
        assert!(check_prefix("app{1}:").is_err());
    }
}
