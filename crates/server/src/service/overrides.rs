//! Overrides (#63): limits set as data for one exact descriptor path of a domain
//! ([`spillway_policy::overrides::Override`]), kept and shared by the registry
//! (`limits.rs`); this is the service's index of them. A request's path is looked
//! up among its domain's overrides first, then in the policy file's tree: an override
//! takes precedence for exactly its path, a sibling path keeps the file's rules. While
//! there are none, a request does not even load the index.
//!
//! The index is behind an `ArcSwap`: a request decides on the snapshot it loaded. A
//! domain's overrides are 256 hash maps (by the path's hash), each behind an `Arc`: a
//! change copies the one map it touches (a 256th of the domain, its keys shared), not
//! the domain, and a lookup is one hash map's (a flat byte key, kept in the entry
//! when it is short: one allocation an override). Overrides of the same keys and
//! limits share one compiled plan.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use spillway_core::Limit;
use spillway_policy::overrides::{self, OverrideError};
use spillway_policy::{Domain, Match, PolicySet, RuleLimit};

/// Every domain's overrides.
pub(crate) type Index = HashMap<Arc<str>, DomainOverrides, foldhash::fast::RandomState>;

/// How many maps a domain's overrides are spread over.
const SHARDS: usize = 256;

/// One override in a map: its path's hash, compared first (a lookup that misses reads
/// no entry, even when the table's 7-bit tag matches), and its entry, which holds the
/// path.
#[derive(Clone, Debug)]
struct Slot {
    hash: u64,
    entry: Arc<Entry>,
}

type Shard = hashbrown::HashTable<Slot>;

/// One domain's overrides, by path (encoded: [`encode`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct DomainOverrides {
    /// Empty, or [`SHARDS`] maps.
    shards: Vec<Arc<Shard>>,
    len: usize,
    /// Hashes a path: bits 32 to 39 pick its map (the table itself reads the low bits
    /// and the top seven).
    hasher: foldhash::fast::RandomState,
}

impl DomainOverrides {
    /// How many overrides.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A path's hash, and its map.
    fn locate(&self, key: &[u8]) -> (u64, usize) {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one(key);
        (hash, (hash >> 32) as usize % SHARDS)
    }

    /// The override of exactly `entries`.
    pub(crate) fn get<K: AsRef<str>, V: AsRef<str>>(
        &self,
        entries: &[(K, V)],
    ) -> Option<&Arc<Entry>> {
        if self.len == 0 {
            return None;
        }
        KEY.with_borrow_mut(|key| {
            encode(entries, key);
            self.find(key)
        })
    }

    /// The override of the path encoded as `key` ([`encode`]).
    fn find(&self, key: &[u8]) -> Option<&Arc<Entry>> {
        if self.len == 0 {
            return None;
        }
        let (hash, i) = self.locate(key);
        let slot = self.shards[i].find(hash, is(hash, key))?;
        Some(&slot.entry)
    }

    /// Sets the override of the path `entry` holds.
    fn insert(&mut self, entry: Arc<Entry>) {
        if self.shards.is_empty() {
            self.shards = (0..SHARDS).map(|_| Arc::default()).collect();
        }
        let (hash, i) = self.locate(&entry.key);
        let shard = Arc::make_mut(&mut self.shards[i]);
        match shard.find_mut(hash, is(hash, &entry.key)) {
            Some(slot) => slot.entry = entry,
            None => {
                shard.insert_unique(hash, Slot { hash, entry }, |s| s.hash);
                self.len += 1;
            }
        }
    }

    /// Removes the override of the path encoded as `key`.
    fn remove(&mut self, key: &[u8]) {
        if self.len == 0 {
            return;
        }
        let (hash, i) = self.locate(key);
        let shard = Arc::make_mut(&mut self.shards[i]);
        if let Ok(slot) = shard.find_entry(hash, is(hash, key)) {
            slot.remove();
            self.len -= 1;
        }
    }

    /// Every override: its path and its entry.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Vec<(String, String)>, &Arc<Entry>)> {
        self.shards
            .iter()
            .flat_map(|s| s.iter())
            .map(|s| (decode(&s.entry.key), &s.entry))
    }
}

/// Whether a slot holds the path encoded as `key`, of hash `hash`: the hashes compared
/// first, so that a slot of another path is not read further.
fn is(hash: u64, key: &[u8]) -> impl Fn(&Slot) -> bool + '_ {
    move |s| s.hash == hash && *s.entry.key == *key
}

thread_local! {
    /// A lookup's encoded path: no allocation a decision.
    static KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `entries` as one byte string, each key and value after its length (so that no two
/// paths encode alike), into `out`.
fn encode<K: AsRef<str>, V: AsRef<str>>(entries: &[(K, V)], out: &mut Vec<u8>) {
    out.clear();
    for (k, v) in entries {
        for s in [k.as_ref(), v.as_ref()] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// The entries `encode` wrote.
fn decode(mut key: &[u8]) -> Vec<(String, String)> {
    let mut next = || {
        let (len, rest) = key.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let (s, rest) = rest.split_at_checked(len)?;
        key = rest;
        Some(String::from_utf8_lossy(s).into_owned())
    };
    let mut entries = Vec::new();
    while let (Some(k), Some(v)) = (next(), next()) {
        entries.push((k, v));
    }
    entries
}

/// How many bytes of an encoded path an entry holds in itself: a key and a value of up
/// to 46 bytes together (a value of 39 characters under `api_key`).
const INLINE: usize = 54;

/// A path, encoded ([`encode`]): in the entry itself when it is short (most are), so
/// that a hit reads the entry's memory alone, not a second allocation for its path (a
/// million overrides are far from every cache: each read is a trip to memory).
#[derive(Debug)]
enum PathKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl PathKey {
    fn new(key: &[u8]) -> PathKey {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key);
                PathKey::Inline { len, bytes }
            }
            _ => PathKey::Heap(key.into()),
        }
    }
}

impl std::ops::Deref for PathKey {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            PathKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            PathKey::Heap(key) => key,
        }
    }
}

/// A snapshot of every domain's overrides.
pub(crate) type Snapshot = arc_swap::Guard<Arc<Index>>;

/// One override in the index: its path (encoded), its plan, and who set it when.
#[derive(Debug)]
pub(crate) struct Entry {
    key: PathKey,
    pub(crate) plan: Arc<Plan>,
    /// The registry's version of the change that set it.
    pub(crate) version: u64,
    /// Who set it (the admin token's name, a client certificate's subject).
    pub(crate) by: Arc<str>,
    /// When, in milliseconds since the Unix epoch.
    pub(crate) at_ms: u64,
}

impl Entry {
    /// Its limits, as canonical JSON.
    pub(crate) fn limits(&self) -> &str {
        &self.plan.limits
    }
}

/// Limits compiled over a domain's keys (no values), prepared as the service prepares
/// its files: every override of those keys and limits decides with it.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The domain the limits make (held as itself: a hit finds its rules without
    /// looking the domain up by name).
    pub(crate) domain: Domain,
    limits: Arc<str>,
}

/// The authors of overrides, each kept once.
type Authors = HashMap<String, Arc<str>>;

/// The plans in use, by their limits' text, then domain and keys (a few a text): found
/// without an allocation.
type Plans = HashMap<Arc<str>, Vec<(Arc<str>, Vec<String>, Arc<Plan>)>>;

/// The service's overrides.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    all: ArcSwap<Index>,
    any: AtomicBool,
    /// Writers one at a time; the plans in use, by what they are compiled from, and
    /// the authors (shared by their overrides).
    plans: Mutex<(Plans, Authors)>,
}

/// One change to apply to the index.
#[derive(Debug)]
pub(crate) struct Set<'a> {
    pub(crate) domain: &'a str,
    pub(crate) entries: &'a [(String, String)],
    /// The limits, as JSON text; `None` removes the path's override.
    pub(crate) limits: Option<&'a str>,
    pub(crate) version: u64,
    pub(crate) by: &'a str,
    pub(crate) at_ms: u64,
}

impl Overrides {
    /// The snapshot in force now; `None` while there are no overrides.
    pub(crate) fn load(&self) -> Option<Snapshot> {
        self.any.load(Ordering::Acquire).then(|| self.all.load())
    }

    /// The limit named `name` that the override of exactly `entries` in `domain` sets
    /// (its only limit when it has one, whatever its name), if there is one.
    pub(crate) fn limit<K: AsRef<str>, V: AsRef<str>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
        name: &str,
    ) -> Option<Limit> {
        let snapshot = self.load()?;
        let entry = snapshot.get(domain)?.get(entries)?;
        let rules = entry.plan.domain.resolve(entries)?.rules;
        let rule = match rules {
            [only] => only,
            _ => rules.iter().find(|r| r.name.as_deref() == Some(name))?,
        };
        match &rule.limit {
            RuleLimit::Limited(limit) => Some(limit.clone()),
            RuleLimit::Unlimited | RuleLimit::BlockAll => None,
        }
    }

    /// Every override now (for listing and saving: a snapshot, not a copy).
    pub(crate) fn snapshot(&self) -> Arc<Index> {
        self.all.load_full()
    }

    /// Applies `changes` in order as one swap, each prepared by `prepare` (`fresh`:
    /// over no overrides, a full load replacing them all). A change older than the
    /// override it meets (a version at or below the path's) is passed over: the
    /// registry may hear of a change twice. A change of version 0 (set in process,
    /// `Service::set_override`) always applies. Refused whole, nothing applied, when an
    /// override's limits do not compile.
    pub(crate) fn apply(
        &self,
        changes: &[Set<'_>],
        fresh: bool,
        prepare: impl Fn(PolicySet) -> PolicySet,
    ) -> Result<(), Vec<OverrideError>> {
        let mut writer = self.plans.lock();
        let (plans, authors) = &mut *writer;
        let mut all = if fresh {
            Index::default()
        } else {
            Index::clone(&self.all.load())
        };
        for c in changes {
            let d = match all.get_mut(c.domain) {
                Some(d) => d,
                None => all.entry(Arc::from(c.domain)).or_default(),
            };
            // The path encoded once: looked up, kept in the entry, or removed.
            let mut key = Vec::new();
            encode(c.entries, &mut key);
            let older = d
                .find(&key)
                .is_some_and(|e| c.version > 0 && e.version >= c.version);
            if older {
                continue;
            }
            match c.limits {
                Some(limits) => {
                    overrides::check_path(c.entries)?;
                    let plan = plan(plans, c.domain, c.entries, limits, &prepare)?;
                    let by = authors
                        .entry(c.by.to_owned())
                        .or_insert_with(|| Arc::from(c.by));
                    let entry = Entry {
                        key: PathKey::new(&key),
                        plan,
                        version: c.version,
                        by: Arc::clone(by),
                        at_ms: c.at_ms,
                    };
                    d.insert(Arc::new(entry));
                }
                None => d.remove(&key),
            }
        }
        all.retain(|_, d| d.len() > 0);
        let any = !all.is_empty();
        self.all.store(Arc::new(all));
        self.any.store(any, Ordering::Release);
        // The plans and authors no override uses any longer (one a reader's old
        // snapshot still holds goes at a later change).
        for same in plans.values_mut() {
            same.retain(|(_, _, p)| Arc::strong_count(p) > 1);
        }
        plans.retain(|_, same| !same.is_empty());
        authors.retain(|_, a| Arc::strong_count(a) > 1);
        Ok(())
    }
}

/// The plan of `limits` (JSON text) over the keys of `entries`: one in use, or
/// compiled now.
fn plan(
    plans: &mut Plans,
    domain: &str,
    entries: &[(String, String)],
    limits: &str,
    prepare: &impl Fn(PolicySet) -> PolicySet,
) -> Result<Arc<Plan>, Vec<OverrideError>> {
    let same_keys = |keys: &[String]| {
        keys.len() == entries.len() && keys.iter().zip(entries).all(|(k, (e, _))| k == e)
    };
    if let Some(p) = plans
        .get(limits)
        .and_then(|same| same.iter().find(|(d, k, _)| &**d == domain && same_keys(k)))
    {
        return Ok(Arc::clone(&p.2));
    }
    // What is wrong with the limits, as the registry reports it.
    let refused = |message: String| {
        vec![OverrideError {
            field: "limits".into(),
            message,
        }]
    };
    let value: serde_json::Value =
        serde_json::from_str(limits).map_err(|e| refused(format!("not JSON: {e}")))?;
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    let compiled = overrides::plan(domain, &keys, &value)?;
    let set = spillway_policy::assemble([compiled]).map_err(|e| refused(e.to_string()))?;
    let prepared = prepare(set)
        .into_domain(domain)
        .ok_or_else(|| refused(format!("compiled no domain `{domain}`")))?;
    let text: Arc<str> = Arc::from(limits);
    let plan = Arc::new(Plan {
        domain: prepared,
        limits: Arc::clone(&text),
    });
    plans.entry(text).or_default().push((
        Arc::from(domain),
        keys.iter().map(|k| (*k).to_owned()).collect(),
        Arc::clone(&plan),
    ));
    Ok(plan)
}

/// Where a request's rules are found: its domain's overrides first (one exact path
/// each), then the policy file's tree.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules<'p> {
    /// The domain as its policy file says it.
    pub(crate) file: &'p Domain,
    pub(crate) overrides: Option<&'p DomainOverrides>,
}

impl<'p> Rules<'p> {
    /// The file's rules alone.
    pub(crate) fn of_file(file: &'p Domain) -> Rules<'p> {
        Rules {
            file,
            overrides: None,
        }
    }

    /// The file's rules behind `snapshot`'s overrides of the file's domain.
    pub(crate) fn with(file: &'p Domain, snapshot: Option<&'p Snapshot>) -> Rules<'p> {
        Rules {
            file,
            overrides: snapshot.and_then(|s| s.get(file.name())),
        }
    }

    /// The override of exactly `entries`, if there is one.
    pub(crate) fn overridden(&self, entries: &[(String, String)]) -> Option<&'p Arc<Entry>> {
        self.overrides.and_then(|o| o.get(entries))
    }

    /// The rules for `entries`: an override of exactly that path, else the file's.
    pub(crate) fn resolve(&self, entries: &[(String, String)]) -> Option<Match<'p>> {
        match self.overridden(entries) {
            Some(e) => e.plan.domain.resolve(entries),
            None => self.file.resolve(entries),
        }
    }
}

/// A path as text: `key=value` entries joined by `/`, with `%` and `/` in keys and
/// values written `%25` and `%2F` (so that no two paths have one text). Pages are in its order
/// and filtered by its prefix.
pub fn path_text(path: &[(String, String)]) -> String {
    let mut text = String::new();
    let escaped = |s: &str, text: &mut String| {
        for c in s.chars() {
            match c {
                '%' => text.push_str("%25"),
                '/' => text.push_str("%2F"),
                c => text.push(c),
            }
        }
    };
    for (i, (k, v)) in path.iter().enumerate() {
        if i > 0 {
            text.push('/');
        }
        escaped(k, &mut text);
        text.push('=');
        escaped(v, &mut text);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path is kept whole whatever its length: in the entry up to [`INLINE`] bytes,
    /// on the heap past it, and two paths that differ only in their last byte differ.
    #[test]
    fn a_path_key_is_the_path_inline_or_not() {
        for len in [0, 1, INLINE - 1, INLINE, INLINE + 1, 300] {
            let path: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let key = PathKey::new(&path);
            assert_eq!(&*key, &path[..], "{len} bytes");
            assert_eq!(matches!(key, PathKey::Inline { .. }), len <= INLINE);
            if let Some(last) = path.last() {
                let mut other = path.clone();
                *other.last_mut().unwrap() = last.wrapping_add(1);
                assert_ne!(&*key, &other[..], "{len} bytes");
            }
        }
        let mut encoded = Vec::new();
        encode(&[("api_key", "k".repeat(39))], &mut encoded);
        assert!(encoded.len() <= INLINE, "a 39-byte API key is kept inline");
    }
}
