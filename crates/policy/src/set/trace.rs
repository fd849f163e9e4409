//! How a descriptor goes through a domain's tree, told step by step: what `explain`
//! reports. [`Domain::trace`] shares its walk with `resolve`.

use super::{Domain, Level, Match, Miss};

impl Domain {
    /// [`resolve`](Domain::resolve), saying how: the node each entry reached and by
    /// which rule of matching, and, when nothing matched, why and what exists there.
    pub fn trace<K: AsRef<str>, V: AsRef<str>>(&self, entries: &[(K, V)]) -> Trace<'_> {
        let mut steps = Vec::with_capacity(entries.len());
        let found = self.walk(entries, |entry, node: &str, how| {
            steps.push(Step {
                entry,
                node: node.to_owned(),
                how,
            })
        });
        match found {
            Ok(m) => Trace {
                steps,
                matched: Some(m),
                unmatched: None,
            },
            Err(miss) => Trace {
                steps,
                matched: None,
                unmatched: Some(match miss {
                    Miss::NoEntries => Unmatched::NoEntries,
                    Miss::NoNode { entry, level } => {
                        let (k, v) = (entries[entry].0.as_ref(), entries[entry].1.as_ref());
                        Unmatched::NoNode {
                            entry,
                            closest: level.closest(k, v),
                            existing: level.names(),
                        }
                    }
                    Miss::NoRules { entry } => Unmatched::NoRules { entry },
                    Miss::PathEnds { entry, more } => Unmatched::PathEnds { entry, more },
                }),
            },
        }
    }
}

impl Level {
    /// The node most like `key_value` or `key` (by edit distance), for a person who
    /// mistyped one.
    fn closest(&self, key: &str, value: &str) -> Option<String> {
        let composite = format!("{key}_{value}");
        self.nodes
            .keys()
            .map(|n| {
                let d = strsim::levenshtein(n, key).min(strsim::levenshtein(n, &composite));
                (d, n)
            })
            .min()
            .map(|(_, n)| n.clone())
    }

    /// The node names of this level, sorted (at most 20, for a person to read).
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.nodes.keys().cloned().collect();
        names.sort();
        names.truncate(20);
        names
    }
}

/// How a descriptor went through a domain's tree: see [`Domain::trace`].
#[derive(Debug)]
pub struct Trace<'a> {
    /// One per entry that reached a node, in order.
    pub steps: Vec<Step>,
    /// The rules matched, when the descriptor reached a node with rules by its last entry.
    pub matched: Option<Match<'a>>,
    /// Otherwise why not.
    pub unmatched: Option<Unmatched>,
}

/// One entry's node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The entry's position in the descriptor.
    pub entry: usize,
    /// The node as configured: `key_value`, a wildcard `key_prefix*`, or `key`.
    pub node: String,
    /// How it was found.
    pub how: How,
}

/// Which rule of matching found a node, in the order they are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// The node `key_value`.
    Exact,
    /// A wildcard node, the first in config order that matches `key_value`.
    Wildcard,
    /// The node `key`, which matches any value.
    Key,
}

impl How {
    /// `exact`, `wildcard`, `any value`.
    pub fn name(self) -> &'static str {
        match self {
            How::Exact => "exact",
            How::Wildcard => "wildcard",
            How::Key => "any value",
        }
    }
}

/// Why a descriptor matched no rule; `entry` is a position in the descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Unmatched {
    /// The descriptor has no entries.
    NoEntries,
    /// Entry `entry` matched no node of its level; `existing` are that level's nodes
    /// (sorted, at most 20), `closest` the one most like the entry.
    NoNode {
        entry: usize,
        existing: Vec<String>,
        closest: Option<String>,
    },
    /// The path reached a node without rules (a value listed to be left alone).
    NoRules { entry: usize },
    /// The tree ends at entry `entry`, with `more` entries left over.
    PathEnds { entry: usize, more: usize },
}

impl std::fmt::Display for Unmatched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unmatched::NoEntries => write!(f, "the descriptor has no entries"),
            Unmatched::NoNode {
                entry, existing, ..
            } if existing.is_empty() => {
                write!(f, "entry {entry} matches no node: the level is empty")
            }
            Unmatched::NoNode {
                entry,
                existing,
                closest,
            } => {
                write!(f, "entry {entry} matches no node")?;
                if let Some(c) = closest {
                    write!(f, "; the closest is `{c}`")?;
                }
                write!(f, "; the nodes there are {}", existing.join(", "))
            }
            Unmatched::NoRules { entry } => write!(
                f,
                "entry {entry} reaches a node without limits (its values are left alone)"
            ),
            Unmatched::PathEnds { entry, more } => write!(
                f,
                "the tree ends at entry {entry}; the {more} entr{} after it match nothing \
                 (a node's limits apply only to a descriptor that ends there)",
                if *more == 1 { "y" } else { "ies" }
            ),
        }
    }
}
