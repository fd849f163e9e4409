//! Who is being limited: per rule, the keys denied most over the last minutes, in fixed
//! memory whatever the number of keys. Each rule keeps a Space-Saving summary (Metwally,
//! Agrawal, El Abbadi, 2005) per minute of the last [`MINUTES`]: [`CAPACITY`] counters;
//! a key not counted takes the smallest counter's place and inherits its count as its
//! error. Any key denied more than 1/[`CAPACITY`] of a minute's denials is always
//! counted, and a reported count is never below the truth nor more than `error` above
//! it. Never exported as metric labels (one label value per key would be unbounded).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// Counters per rule per minute.
pub const CAPACITY: usize = 64;
/// Minutes a denial is remembered.
pub const MINUTES: u64 = 5;
/// Keys shown per rule.
pub const SHOWN: usize = 10;
const SHARDS: usize = 16;

/// The heaviest denied keys of every rule.
#[derive(Debug)]
pub struct TopKeys {
    shards: Vec<Mutex<HashMap<RuleId, Rule>>>,
    hasher: std::collections::hash_map::RandomState,
}

/// A rule: its domain and config path.
type RuleId = (Arc<str>, Arc<str>);

#[derive(Debug)]
struct Rule {
    name: Arc<str>,
    /// Summaries by minute, `minute % MINUTES`.
    minutes: Vec<Summary>,
}

#[derive(Debug, Default)]
struct Summary {
    minute: u64,
    counters: Vec<Counter>,
    index: HashMap<Box<str>, usize>,
}

#[derive(Debug)]
struct Counter {
    key: Box<str>,
    count: u64,
    error: u64,
}

/// One rule's heaviest denied keys.
#[derive(Debug, Serialize)]
pub struct RuleTop {
    /// The rule's name, or its config path.
    pub rule: String,
    /// Its config path.
    pub path: String,
    /// Heaviest first.
    pub keys: Vec<Heavy>,
}

/// A key and how often it was denied over the last minutes.
#[derive(Debug, Serialize)]
pub struct Heavy {
    pub key: String,
    /// At least the true count minus `error`, never below the truth.
    pub denied: u64,
    pub error: u64,
}

impl Default for TopKeys {
    fn default() -> TopKeys {
        TopKeys {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: Default::default(),
        }
    }
}

impl Summary {
    fn record(&mut self, key: &str) {
        if let Some(&i) = self.index.get(key) {
            self.counters[i].count += 1;
            return;
        }
        if self.counters.len() < CAPACITY {
            self.index.insert(key.into(), self.counters.len());
            self.counters.push(Counter {
                key: key.into(),
                count: 1,
                error: 0,
            });
            return;
        }
        let (i, min) = self
            .counters
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.count)
            .map(|(i, c)| (i, c.count))
            .expect("full");
        self.index.remove(&self.counters[i].key);
        self.index.insert(key.into(), i);
        self.counters[i] = Counter {
            key: key.into(),
            count: min + 1,
            error: min,
        };
    }

    /// What a key this summary does not count may have had: the smallest counter, once
    /// full.
    fn floor(&self) -> u64 {
        if self.counters.len() < CAPACITY {
            return 0;
        }
        self.counters.iter().map(|c| c.count).min().unwrap_or(0)
    }
}

impl TopKeys {
    /// One denial of `key` by the rule at `path` (named `name`) of `domain`, at minute
    /// `minute` (since the epoch).
    pub fn record(
        &self,
        domain: &Arc<str>,
        path: &Arc<str>,
        name: &Arc<str>,
        key: &str,
        minute: u64,
    ) {
        let id = (Arc::clone(domain), Arc::clone(path));
        let mut shard = self.shards[self.hasher.hash_one(&id) as usize % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let rule = shard.entry(id).or_insert_with(|| Rule {
            name: Arc::clone(name),
            minutes: (0..MINUTES).map(|_| Summary::default()).collect(),
        });
        let summary = &mut rule.minutes[(minute % MINUTES) as usize];
        if summary.minute != minute {
            *summary = Summary {
                minute,
                ..Summary::default()
            };
        }
        summary.record(key);
    }

    /// The rules of `domain` that denied in the last [`MINUTES`] minutes before
    /// `minute`, each with its heaviest keys, heaviest rule first.
    pub fn top(&self, domain: &str, minute: u64) -> Vec<RuleTop> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            for ((d, path), rule) in shard.iter() {
                if &**d != domain {
                    continue;
                }
                let live: Vec<&Summary> = rule
                    .minutes
                    .iter()
                    .filter(|s| !s.counters.is_empty() && s.minute + MINUTES > minute)
                    .collect();
                if live.is_empty() {
                    continue;
                }
                let mut merged: HashMap<&str, (u64, u64)> = HashMap::new();
                for s in &live {
                    for c in &s.counters {
                        let e = merged.entry(&c.key).or_default();
                        e.0 += c.count;
                        e.1 += c.error;
                    }
                }
                // A key one summary does not count may have had up to its floor there.
                for (key, e) in merged.iter_mut() {
                    for s in &live {
                        if !s.index.contains_key(*key) {
                            e.0 += s.floor();
                            e.1 += s.floor();
                        }
                    }
                }
                let mut keys: Vec<Heavy> = merged
                    .into_iter()
                    .map(|(key, (denied, error))| Heavy {
                        key: key.to_owned(),
                        denied,
                        error,
                    })
                    .collect();
                keys.sort_by(|a, b| b.denied.cmp(&a.denied).then_with(|| a.key.cmp(&b.key)));
                keys.truncate(SHOWN);
                out.push(RuleTop {
                    rule: rule.name.to_string(),
                    path: path.to_string(),
                    keys,
                });
            }
        }
        out.sort_by(|a, b| {
            let heaviest = |r: &RuleTop| r.keys.first().map_or(0, |k| k.denied);
            heaviest(b)
                .cmp(&heaviest(a))
                .then_with(|| a.rule.cmp(&b.rule))
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zipf-skewed denials over 5,000 keys: the ten heaviest by exact count are the ten
    /// reported, each count within its error of the truth.
    #[test]
    fn the_heaviest_keys_of_skewed_traffic_are_found_with_bounded_error() {
        let top = TopKeys::default();
        let (domain, path, name): (Arc<str>, Arc<str>, Arc<str>) =
            ("d".into(), "user".into(), "per-user".into());
        let mut exact: HashMap<String, u64> = HashMap::new();
        // A deterministic Zipf(1.1)-like stream: key i comes about 1/i^1.1 as often.
        let weights: Vec<f64> = (1..=5000).map(|i| 1.0 / f64::powf(i as f64, 1.1)).collect();
        let total: f64 = weights.iter().sum();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for n in 0..200_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut x = (state >> 11) as f64 / (1u64 << 53) as f64 * total;
            let i = weights.iter().position(|w| {
                x -= w;
                x <= 0.0
            });
            let key = format!("user={}", i.unwrap_or(4999));
            *exact.entry(key.clone()).or_default() += 1;
            top.record(&domain, &path, &name, &key, n / 50_000);
        }
        let mut truth: Vec<(String, u64)> = exact.into_iter().collect();
        truth.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let found = top.top("d", 3);
        assert_eq!(found.len(), 1);
        let keys = &found[0].keys;
        assert_eq!(keys.len(), SHOWN);
        assert_eq!(found[0].rule, "per-user");
        let truth_of = |k: &str| truth.iter().find(|t| t.0 == k).unwrap().1;
        for h in keys {
            let t = truth_of(&h.key);
            assert!(h.denied >= t && h.denied - h.error <= t, "{h:?} true {t}");
        }
        // The three heaviest are exact in order (their lead is far above any error).
        for (h, t) in keys.iter().zip(&truth).take(3) {
            assert_eq!(h.key, t.0);
        }
        assert!(top.top("other", 3).is_empty());
        // Five minutes later, forgotten.
        assert!(top.top("d", 3 + MINUTES).is_empty());
    }
}
