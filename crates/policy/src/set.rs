//! The validated configuration, and matching a request's descriptor against it the way
//! the reference service does (`GetLimit` in envoyproxy/ratelimit).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use spillway_core::Key;

use crate::Rule;

mod keys;
mod trace;

pub use keys::{
    MAX_VALUE_KEPT, digested, escape_into, member_of, override_key, value_into, wildcard_match,
};
pub use trace::{How, Step, Trace, Unmatched};

/// Every domain loaded from a file or directory. Immutable: a reload builds a new one.
#[derive(Debug, Default)]
pub struct PolicySet {
    pub(crate) domains: HashMap<Arc<str>, Domain>,
}

/// One domain: the rules of one file.
#[derive(Debug)]
pub struct Domain {
    pub(crate) name: Arc<str>,
    /// What every counter key of the domain starts with: its name, escaped, behind the
    /// set's key prefix if it has one ([`PolicySet::with_key_prefix`]).
    pub(crate) key_root: String,
    pub(crate) file: PathBuf,
    pub(crate) root: Level,
    pub(crate) rules: usize,
}

/// The nodes of one level, keyed `key_value` (or `key` when the node has no value), as
/// the reference keys them; wildcard nodes also in config order.
#[derive(Debug, Default)]
pub(crate) struct Level {
    pub(crate) nodes: HashMap<String, Node>,
    pub(crate) wildcards: Vec<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Node {
    pub(crate) rules: Vec<Rule>,
    pub(crate) children: Option<Level>,
    /// `share_threshold`: every value this wildcard matches shares one counter.
    pub(crate) shared_pattern: Option<String>,
}

/// The rules one descriptor matched, and the key group they count under.
#[derive(Debug)]
pub struct Match<'a> {
    /// The rules of the matched node (never empty).
    pub rules: &'a [Rule],
    /// The counter group: the domain and the request's entries (a `share_threshold`
    /// level contributes its pattern instead of the value), escaped so that different
    /// descriptors never collide. Every rule of the match counts in this group.
    pub group: String,
    /// Where the last entry's value starts in `group`: a `distinct` rule counts the
    /// distinct values of the last entry (its member) per the entries before it, a
    /// `concurrency` rule holds slots under it.
    last: usize,
    /// The index of the matched node's entry in the descriptor: the request's member.
    pub member: usize,
    /// The index of the entry naming a `shares` rule's priority, when the descriptor
    /// ends with one (see [`Priorities`](crate::Priorities)).
    pub priority: Option<usize>,
}

impl Match<'_> {
    /// The counter key of `rule` (one of [`rules`](Match::rules)): the group, then the
    /// rule's `slot`; e.g. `api|api_key=k1` + `#burst`. At a node with a `distinct`
    /// rule, every rule's key group stops before the last entry's value (so the node's
    /// keys share a Cluster slot): the `distinct` rule counts per the entries before
    /// it (`api|api_key=k1|ip` + `#ips`), the others keep the value in their key
    /// (`api|api_key=k1|ip` + `=10.0.0.4#burst`). A `concurrency` rule is keyed as a
    /// `distinct` one: its holds are per the entries before the request's id. Fails only past
    /// [`MAX_KEY_LEN`](spillway_core::MAX_KEY_LEN).
    pub fn key(&self, rule: &Rule) -> Result<Key, spillway_core::Error> {
        if !self.takes_member() {
            return Key::grouped(&self.group, &rule.slot);
        }
        let (group, value) = self.group.split_at(self.last);
        if rule.takes_member() {
            Key::grouped(group, &rule.slot)
        } else {
            Key::grouped(group, &format!("{value}{}", rule.slot))
        }
    }

    fn takes_member(&self) -> bool {
        self.rules.iter().any(Rule::takes_member)
    }
}

impl PolicySet {
    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// The domain named `name`, taken out of the set (a set compiled for one domain,
    /// kept as that domain alone).
    pub fn into_domain(mut self, name: &str) -> Option<Domain> {
        self.domains.remove(name)
    }

    /// This set with every counter key under `prefix` (written as given, not escaped):
    /// the same descriptors, counted apart from another set's. The candidate set
    /// (`--candidate-config`) counts under `~candidate|`.
    pub fn with_key_prefix(mut self, prefix: &str) -> PolicySet {
        for domain in self.domains.values_mut() {
            domain.key_root.insert_str(0, prefix);
        }
        self
    }

    /// This set with every reference rule charged only for the requests it denies
    /// itself ([`Rule::charging_own_rejections`], the reference's
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub fn charging_own_rejections(mut self) -> PolicySet {
        fn walk(level: &mut Level) {
            for node in level.nodes.values_mut() {
                let rules = std::mem::take(&mut node.rules);
                node.rules = rules
                    .into_iter()
                    .map(Rule::charging_own_rejections)
                    .collect();
                if let Some(children) = &mut node.children {
                    walk(children);
                }
            }
        }
        for domain in self.domains.values_mut() {
            walk(&mut domain.root);
        }
        self
    }

    /// Every domain, sorted by name.
    pub fn domains(&self) -> Vec<&Domain> {
        let mut all: Vec<&Domain> = self.domains.values().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}

impl Domain {
    /// Adds `other`'s descriptors (the same domain, from another file) to this one's, as
    /// the reference's `MERGE_DOMAIN_CONFIG` does: a top-level descriptor both declare
    /// (the same `key_value`) is refused, and nothing of `other` is added then.
    pub(crate) fn merge(&mut self, other: Domain) -> Option<crate::Error> {
        let both: Vec<&String> = other
            .root
            .nodes
            .keys()
            .filter(|name| self.root.nodes.contains_key(*name))
            .collect();
        if let Some(name) = both.first() {
            return Some(crate::Error::new(
                &other.file,
                None,
                "descriptors",
                format!(
                    "duplicate descriptor composite key '{name}' in domain '{}' (also in {})",
                    self.name,
                    self.file.display()
                ),
            ));
        }
        self.root.nodes.extend(other.root.nodes);
        self.root.wildcards.extend(other.root.wildcards);
        self.rules += other.rules;
        None
    }

    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The domain's name, shared (for metric labels without an allocation).
    pub fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The file it was loaded from.
    pub fn file(&self) -> &std::path::Path {
        &self.file
    }

    /// How many rules it holds.
    pub fn rule_count(&self) -> usize {
        self.rules
    }

    /// Every rule of the domain, ordered by config path (for summaries and `validate`).
    pub fn rules(&self) -> Vec<&Rule> {
        fn walk<'a>(level: &'a Level, out: &mut Vec<&'a Rule>) {
            for node in level.nodes.values() {
                out.extend(&node.rules);
                if let Some(children) = &node.children {
                    walk(children, out);
                }
            }
        }
        let mut out = Vec::with_capacity(self.rules);
        walk(&self.root, &mut out);
        out.sort_by(|a, b| (&a.metric, &a.slot).cmp(&(&b.metric, &b.slot)));
        out
    }

    /// The rules for an RLQS bucket: its pairs (a map, in no order; here sorted by
    /// key) taken in the order the tree asks for them (at each level, the first pair
    /// that reaches a node there, as [`resolve`](Domain::resolve) reaches one), then
    /// resolved as a descriptor of them. `None` when a pair is left that no level asks
    /// for, or the path matches no rules.
    pub fn resolve_bucket(&self, pairs: &[(String, String)]) -> Option<Match<'_>> {
        self.match_bucket(pairs).ok()
    }

    /// [`resolve_bucket`](Domain::resolve_bucket), saying what did not match: the
    /// pairs no level asked for (none when every pair was taken and the path it made
    /// has no rules).
    pub fn match_bucket<'p>(
        &self,
        pairs: &'p [(String, String)],
    ) -> Result<Match<'_>, Vec<&'p (String, String)>> {
        let mut left: Vec<&(String, String)> = pairs.iter().collect();
        let mut ordered: Vec<(&str, &str)> = Vec::with_capacity(pairs.len());
        let mut level = Some(&self.root);
        let mut composite = String::with_capacity(64);
        while !left.is_empty() {
            let Some(here) = level else {
                return Err(left);
            };
            let found = left.iter().enumerate().find_map(|(i, (k, v))| {
                composite_of(&mut composite, k, v);
                here.find(k, &composite).map(|(_, node, _)| (i, node))
            });
            let Some((i, node)) = found else {
                return Err(left);
            };
            let (k, v) = left.remove(i);
            ordered.push((k, v));
            level = node.children.as_ref();
        }
        self.resolve(&ordered).ok_or(left)
    }

    /// The rules for a descriptor's `(key, value)` entries, as the reference finds them:
    /// at each level the exact `key_value`, then the wildcards in config order, then the
    /// key alone. A node's rules apply only when it is reached by the last entry; a node
    /// without rules (a whitelisted value) or a path that runs out matches nothing.
    pub fn resolve<K: AsRef<str>, V: AsRef<str>>(&self, entries: &[(K, V)]) -> Option<Match<'_>> {
        self.walk(entries, |_, _, _| ()).ok()
    }

    /// The walk behind `resolve` and `trace`: `step` is told each node reached.
    fn walk<K: AsRef<str>, V: AsRef<str>>(
        &self,
        entries: &[(K, V)],
        mut step: impl FnMut(usize, &str, How),
    ) -> Result<Match<'_>, Miss<'_>> {
        let mut level = &self.root;
        let mut group = String::with_capacity(64);
        group.push_str(&self.key_root);
        let mut composite = String::with_capacity(64);
        let last = entries.len().checked_sub(1).ok_or(Miss::NoEntries)?;
        for (i, (k, v)) in entries.iter().enumerate() {
            let (k, v) = (k.as_ref(), v.as_ref());
            composite_of(&mut composite, k, v);
            let (name, node, how) = level
                .find(k, &composite)
                .ok_or(Miss::NoNode { entry: i, level })?;
            step(i, name, how);

            group.push('|');
            escape_into(&mut group, k);
            let split = group.len();
            match &node.shared_pattern {
                Some(pattern) => {
                    group.push(':');
                    escape_into(&mut group, pattern);
                }
                None => {
                    group.push('=');
                    value_into(&mut group, v);
                }
            }

            if i == last {
                if node.rules.is_empty() {
                    return Err(Miss::NoRules { entry: i });
                }
                return Ok(Match {
                    rules: &node.rules,
                    group,
                    last: split,
                    member: i,
                    priority: None,
                });
            }
            // A `shares` rule's priority, named by the descriptor's last entry.
            if i + 1 == last
                && node.rules.iter().any(|r| {
                    r.priorities
                        .as_ref()
                        .is_some_and(|p| p.key == entries[last].0.as_ref())
                })
            {
                return Ok(Match {
                    rules: &node.rules,
                    group,
                    last: split,
                    member: i,
                    priority: Some(last),
                });
            }
            level = node.children.as_ref().ok_or(Miss::PathEnds {
                entry: i,
                more: entries.len() - i - 1,
            })?;
        }
        Err(Miss::NoEntries)
    }
}

/// `key_value`, as a level names the node of a value, into `into`.
fn composite_of(into: &mut String, k: &str, v: &str) {
    into.clear();
    into.push_str(k);
    into.push('_');
    into.push_str(v);
}

impl Level {
    /// The node the entry `k` (`composite`: `k_v`) reaches at this level: the exact
    /// `key_value`, then the wildcards in config order, then the key alone.
    fn find(&self, k: &str, composite: &str) -> Option<(&String, &Node, How)> {
        self.nodes
            .get_key_value(composite)
            .map(|(n, node)| (n, node, How::Exact))
            .or_else(|| {
                self.wildcards
                    .iter()
                    .find(|pattern| wildcard_match(pattern, composite))
                    .and_then(|pattern| self.nodes.get_key_value(pattern))
                    .map(|(n, node)| (n, node, How::Wildcard))
            })
            .or_else(|| {
                self.nodes
                    .get_key_value(k)
                    .map(|(n, node)| (n, node, How::Key))
            })
    }
}

/// Why `walk` matched nothing, without allocating (`resolve` is on every request).
enum Miss<'a> {
    NoEntries,
    NoNode { entry: usize, level: &'a Level },
    NoRules { entry: usize },
    PathEnds { entry: usize, more: usize },
}
