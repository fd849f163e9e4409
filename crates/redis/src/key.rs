//! Redis key names: `<prefix>{<group>}<member>:<algorithm>:<window>`, e.g.
//! `spillway:{user:42}:gcra:60s` for a key that is a group of its own, and
//! `spillway:{api|api_key=k1}#burst:gcra:1s` for the limit `burst` of a service
//! descriptor (group `api|api_key=k1`, member `#burst`). Algorithms have short tags
//! (`fw<window number>`, `sl`, `sw<precision>`, `tb<limit>.<burst>`, `gcra`,
//! `dx<precision>`, `db<precision>.<limit>`) and windows a compact
//! unit (`60s`, `1500ms`, `7us`): the name is most of a small state's bytes in Redis.
//!
//! A fixed window has a key per window: `spillway:{user:42}:fw29387462:60s` counts
//! window 29,387,462 since the epoch (the window holding the caller's `now`), and its
//! value is the count alone, a plain integer, so that `INCRBY` can charge it with no
//! script (`counter.rs`) as the Envoy reference does. A window's key is never read once
//! its window is over: it expires a second after it.
//!
//! The `{…}` hash tag is the key's [group](Key::group), so every key of one group lands
//! in one Redis Cluster slot and a batch over them is one script call. Each part is
//! written once.
//!
//! No two (key, shape) pairs give the same name: `%`, `{` and `}` in the group and the
//! member are percent-escaped, so the first `}` ends the group; a key with a member
//! differs from every key without one by the member's text (never empty); the
//! algorithm and window, which contain no `:`, are the last two `:`-separated fields.
//! The name holds the limit's shape as `Limit::shape` defines it: algorithm, window,
//! sliding-window precision, token-bucket rate and burst, and not the capacity of the
//! counting algorithms or GCRA: changing their size keeps their counts.

use std::fmt::Write as _;

use spillway_core::algorithm::distinct;
use spillway_core::{Algorithm, Key, Limit, Timestamp};

/// The Redis key holding `key`'s state for `limit` at `now` (which only a fixed
/// window's name depends on: it names the window holding `now`).
pub fn redis_key(prefix: &str, key: &Key, limit: &Limit, now: Timestamp) -> String {
    name(prefix, None, key, limit, now)
}

/// How a store names its keys: its prefix and, on Cluster, its virtual shards.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub(crate) prefix: String,
    pub(crate) shards: Option<Shards>,
}

impl Layout {
    /// The Redis key holding `key`'s state for `limit` at `now`.
    pub(crate) fn key(&self, key: &Key, limit: &Limit, now: Timestamp) -> String {
        let tag = self.shards.as_ref().map(|s| s.tag(key.group()));
        name(&self.prefix, tag, key, limit, now)
    }
}

/// Virtual shards on Cluster: every group is in one of `n` shards (a hash of its
/// text), and every key of a shard carries the shard's hash tag, so that one script
/// call can decide many groups' keys: `spillway:{~2.41}{user:42}:gcra:60s`. The tags
/// are chosen so that shard i's slot is in the i-th n-th of the 16,384 slots: a
/// Cluster whose masters hold equal ranges of slots holds equal numbers of shards.
#[derive(Clone, Debug)]
pub(crate) struct Shards {
    tags: Vec<String>,
}

impl Shards {
    /// `n` shards (1 ..= [`MAX_CLUSTER_SHARDS`](crate::MAX_CLUSTER_SHARDS)).
    pub(crate) fn new(n: u16) -> Shards {
        let n = u32::from(n.clamp(1, crate::MAX_CLUSTER_SHARDS));
        let tags = (0..n)
            .map(|i| {
                let (low, high) = (i * 16_384 / n, (i + 1) * 16_384 / n);
                (0u32..)
                    .map(|k| format!("~{i}.{k}"))
                    .find(|tag| (low..high).contains(&slot_of(tag)))
                    .expect("some tag hashes into every range of slots")
            })
            .collect();
        Shards { tags }
    }

    /// The hash tag of `group`'s shard: FNV-1a of its bytes, modulo the shards, the
    /// same in every process and version.
    pub(crate) fn tag(&self, group: &str) -> &str {
        let hash = group.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        &self.tags[(hash % self.tags.len() as u64) as usize]
    }
}

/// The Cluster slot of a hash tag's text: CRC16 (XMODEM) modulo 16,384, as Redis
/// computes it (redis-rs's `Slot` keeps its number to itself).
pub(crate) fn slot_of(tag: &str) -> u32 {
    u32::from(crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes())) % 16_384
}

fn name(prefix: &str, shard: Option<&str>, key: &Key, limit: &Limit, now: Timestamp) -> String {
    let mut out = String::with_capacity(prefix.len() + key.as_str().len() + 40);
    out.push_str(prefix);
    if let Some(tag) = shard {
        out.push('{');
        out.push_str(tag);
        out.push('}');
    }
    out.push('{');
    escape(&mut out, key.group());
    out.push('}');
    escape(&mut out, key.member());
    // Short tags: the key name is most of a small state's bytes in Redis.
    let _ = match limit.algorithm() {
        // A calendar's period is named by its start (s) and, below, the calendar.
        Algorithm::FixedWindow if let Some(calendar) = limit.calendar() => {
            write!(out, ":fw{}", calendar.bounds(now.as_micros()).0 / 1_000_000)
        }
        Algorithm::FixedWindow => write!(out, ":fw{}", now.as_micros() / limit.window_micros()),
        Algorithm::SlidingLog => write!(out, ":sl"),
        Algorithm::SlidingWindow { precision, .. } => write!(out, ":sw{precision}"),
        // A token bucket's level is in units of its rate: see `Limit::shape`.
        Algorithm::TokenBucket => write!(out, ":tb{}.{}", limit.limit(), limit.burst()),
        Algorithm::Gcra => write!(out, ":gcra"),
        // A tree: the parent's TAT and its children's, by name.
        Algorithm::Shares => write!(out, ":sh"),
        // Exact members and HyperLogLogs are different states: see `Limit::shape`.
        // A sketch's filters are sized by its limit: see `Limit::shape`.
        Algorithm::Distinct { precision } if distinct::is_exact(limit.limit()) => {
            write!(out, ":dx{precision}")
        }
        // `db`: HyperLogLogs and blocked Bloom filters (`dh` before: flat filters, which an upgrade leaves to expire).
        Algorithm::Distinct { precision } => write!(out, ":db{precision}.{}", limit.limit()),
        // Holds lapse at times of their own: a changed lease keeps them (no window).
        Algorithm::Concurrency => {
            out.push_str(":cc");
            return out;
        }
    };
    let w = limit.window_micros();
    let _ = if let Some(calendar) = limit.calendar() {
        write!(out, ":{}@{}", calendar.period(), calendar.zone())
    } else if w.is_multiple_of(1_000_000) {
        write!(out, ":{}s", w / 1_000_000)
    } else if w.is_multiple_of(1_000) {
        write!(out, ":{}ms", w / 1_000)
    } else {
        write!(out, ":{w}us")
    };
    out
}

/// The ring of a sketched `distinct` limit whose state is at `state`: per sub-window
/// slot a HyperLogLog, `<state>:0` … `<state>:P−1`, then a blocked Bloom filter (a
/// hash of 64-byte blocks), `<state>:f0` … `<state>:fP−1`, all in the state's slot. No other key ends like them: a state key's
/// second-to-last field is an algorithm tag, here it is the window.
pub fn ring_keys(state: &str, limit: &Limit) -> impl Iterator<Item = String> {
    let slots = ring_len(limit) / 2;
    let hll = (0..slots).map(move |i| format!("{state}:{i}"));
    hll.chain((0..slots).map(move |i| format!("{state}:f{i}")))
}

/// How many ring keys `limit` has beside its state key: 2P for a sketched `distinct`
/// limit, none for the others.
pub(crate) fn ring_len(limit: &Limit) -> u32 {
    match limit.algorithm() {
        Algorithm::Distinct { precision } if !distinct::is_exact(limit.limit()) => 2 * precision,
        _ => 0,
    }
}

fn escape(out: &mut String, s: &str) {
    s.chars().for_each(|c| escape_char(out, c));
}

fn escape_char(out: &mut String, c: char) {
    match c {
        '%' => out.push_str("%25"),
        '{' => out.push_str("%7B"),
        '}' => out.push_str("%7D"),
        c => out.push(c),
    }
}

/// The Redis key of an RLQS bucket's shares (`quota.rs`): `<prefix>rlqs:{<domain>|k=v|…}`
/// with the pairs as given (sorted by the caller), each part percent-escaped (`|` and
/// `=` too), so that two buckets never share a name; the braces make the bucket its own
/// hash tag, spreading buckets over a Cluster's slots.
pub(crate) fn quota_key(prefix: &str, domain: &str, pairs: &[(String, String)]) -> String {
    let mut out = String::with_capacity(prefix.len() + 8 + domain.len() + 16 * pairs.len());
    let part = |out: &mut String, s: &str| {
        for c in s.chars() {
            match c {
                '|' => out.push_str("%7C"),
                '=' => out.push_str("%3D"),
                c => escape_char(out, c),
            }
        }
    };
    out.push_str(prefix);
    out.push_str("rlqs:{");
    part(&mut out, domain);
    for (k, v) in pairs {
        out.push('|');
        part(&mut out, k);
        out.push('=');
        part(&mut out, v);
    }
    out.push('}');
    out
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

    /// Window 3 of a minute-long fixed window.
    const NOW: Timestamp = Timestamp::from_secs(200);

    fn limit(a: Algorithm) -> Limit {
        Limit::new(a, 10, Duration::from_secs(60)).unwrap()
    }

    fn name(identity: &str, a: Algorithm) -> String {
        redis_key("rl:", &Key::new(identity).unwrap(), &limit(a), NOW)
    }

    #[test]
    fn quota_keys_escape_every_separator() {
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            quota_key("rl:", "api", &[pair("tenant", "a")]),
            "rl:rlqs:{api|tenant=a}"
        );
        // A value holding the separators is not another bucket's pairs.
        let tricky = quota_key("rl:", "api", &[pair("a", "b|c=d")]);
        let two = quota_key("rl:", "api", &[pair("a", "b"), pair("c", "d")]);
        assert_ne!(tricky, two);
        assert_eq!(tricky, "rl:rlqs:{api|a=b%7Cc%3Dd}");
        assert_eq!(quota_key("", "{%}", &[]), "rlqs:{%7B%25%7D}");
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
            "rl:{a%7Db%25%7B}:fw3:60s"
        );
        // Without escaping, "a}:x" would hash by "a" and read like another identity.
        assert_ne!(name("a}:x", Algorithm::Gcra), name("a", Algorithm::Gcra));
    }

    #[test]
    fn a_group_decides_the_slot_and_is_written_once() {
        let l = limit(Algorithm::Gcra);
        let a = redis_key("rl:", &Key::grouped("api|k=1", "#burst").unwrap(), &l, NOW);
        let b = redis_key("rl:", &Key::grouped("api|k=1", "#day").unwrap(), &l, NOW);
        assert_eq!(a, "rl:{api|k=1}#burst:gcra:60s");
        assert_eq!(Slot::for_key(&a), Slot::for_key(&b));
        assert_eq!(Slot::for_key(&a), Slot::for_key("{api|k=1}"));
        // Braces in a key are only text: they never pick the slot.
        assert_eq!(name("x{a}y", Algorithm::Gcra), "rl:{x%7Ba%7Dy}:gcra:60s");
        let braced = redis_key("rl:", &Key::grouped("{a}", "}b").unwrap(), &l, NOW);
        assert_eq!(braced, "rl:{%7Ba%7D}%7Db:gcra:60s");
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
    fn distinct_keys_never_collide() {
        // Pairs that naive joining or unescaped braces would confuse.
        let ids = [
            "a", "a:", ":a", "a}", "a{", "{a}", "a%7D", "a%", "{a}a", "a{a}", "x{a}", "{a}:x",
            "%7Ba%7D",
        ];
        let mut keys: Vec<Key> = ids.iter().map(|id| Key::new(id).unwrap()).collect();
        for (g, m) in [
            ("a", ":x"),
            ("a", "}"),
            ("a", "a"),
            ("a}", "a"),
            ("a", "}a"),
            ("{a", "}"),
        ] {
            keys.push(Key::grouped(g, m).unwrap());
        }
        let mut seen = std::collections::HashSet::new();
        for key in &keys {
            for a in Algorithm::ALL {
                let name = redis_key("rl:", key, &limit(a), NOW);
                assert!(seen.insert(name.clone()), "collision for {key:?}: {name}");
            }
        }
    }

    #[test]
    fn only_sketched_distinct_limits_have_rings_and_they_share_the_slot() {
        let sketched = Limit::new(
            Algorithm::Distinct { precision: 3 },
            1000,
            Duration::from_secs(60),
        )
        .unwrap();
        let state = redis_key("rl:", &Key::new("k").unwrap(), &sketched, NOW);
        let ring: Vec<String> = ring_keys(&state, &sketched).collect();
        assert_eq!(
            ring,
            [
                "rl:{k}:db3.1000:60s:0",
                "rl:{k}:db3.1000:60s:1",
                "rl:{k}:db3.1000:60s:2",
                "rl:{k}:db3.1000:60s:f0",
                "rl:{k}:db3.1000:60s:f1",
                "rl:{k}:db3.1000:60s:f2",
            ]
        );
        assert!(
            ring.iter()
                .all(|k| Slot::for_key(k) == Slot::for_key(&state))
        );
        for a in Algorithm::ALL
            .into_iter()
            .chain([Algorithm::Distinct { precision: 3 }])
        {
            assert_eq!(ring_keys("x", &limit(a)).count(), 0, "{a:?}");
        }
    }

    #[test]
    fn shards_spread_over_the_slots_and_keep_a_group_in_one() {
        for n in [1, 3, 7, 12, 1000] {
            let shards = Shards::new(n);
            assert_eq!(shards.tags.len(), usize::from(n));
            for (i, tag) in shards.tags.iter().enumerate() {
                let slot = slot_of(tag);
                let i = i as u32;
                let n = u32::from(n);
                assert!(
                    (i * 16_384 / n..(i + 1) * 16_384 / n).contains(&slot),
                    "{tag}"
                );
                // Our slot is Redis's (redis-rs computes it the same way).
                let key = format!("x{{{tag}}}y");
                assert_eq!(Slot::for_key(&key), Slot::new(slot as u16).unwrap());
            }
        }
        let layout = Layout {
            prefix: "rl:".into(),
            shards: Some(Shards::new(3)),
        };
        let l = limit(Algorithm::Gcra);
        let burst = layout.key(&Key::grouped("api|k=1", "#burst").unwrap(), &l, NOW);
        let day = layout.key(&Key::grouped("api|k=1", "#day").unwrap(), &l, NOW);
        assert!(burst.starts_with("rl:{~"), "{burst}");
        assert!(burst.ends_with("}{api|k=1}#burst:gcra:60s"), "{burst}");
        assert_eq!(Slot::for_key(&burst), Slot::for_key(&day));
        // Many groups share the 3 slots; which is fixed (FNV-1a), evenly enough.
        let mut per_shard = std::collections::HashMap::new();
        for g in 0..3000 {
            let k = layout.key(&Key::new(format!("user:{g}")).unwrap(), &l, NOW);
            *per_shard.entry(Slot::for_key(&k)).or_insert(0) += 1;
        }
        assert_eq!(per_shard.len(), 3);
        assert!(
            per_shard.values().all(|&n| (900..=1100).contains(&n)),
            "{per_shard:?}"
        );
        // The same in every process and version (computed apart, in Python).
        assert_eq!(Shards::new(3).tags, ["~0.3", "~1.2", "~2.2"]);
        assert_eq!(Shards::new(3).tag("user:42"), "~2.2");
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(check_prefix("spillway:").is_ok());
        assert!(check_prefix("app{1}:").is_err());
    }
}
