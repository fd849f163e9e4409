//! Overrides (#63): limits set as data for one exact descriptor path of a domain
//! ([`spillway_policy::overrides::Override`]), kept and shared by the registry
//! (`crate::limits`); this is the service's index of them. A request's path is looked
//! up among its domain's overrides first, then in the policy file's tree: an override
//! takes precedence for exactly its path, a sibling path keeps the file's rules. While
//! there are none, a request does not even load the index.
//!
//! The index is a persistent map (`imbl`) behind an `ArcSwap`: a change copies the few
//! trie nodes on its path, not the map, and a request decides on the snapshot it
//! loaded. Overrides of the same keys and limits share one compiled plan.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use spillway_policy::overrides::{self, OverrideError};
use spillway_policy::{Domain, Match, PolicySet};

/// An override's path: its entries, in order.
pub(crate) type Path = Vec<(String, String)>;

/// Every domain's overrides.
pub(crate) type Index = imbl::HashMap<Arc<str>, DomainOverrides>;

/// One domain's overrides, by path.
pub(crate) type DomainOverrides = imbl::HashMap<Path, Arc<Entry>>;

/// A snapshot of every domain's overrides.
pub(crate) type Snapshot = arc_swap::Guard<Arc<Index>>;

/// One override in the index: its plan, and who set it when.
#[derive(Debug)]
pub(crate) struct Entry {
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
    set: PolicySet,
    limits: Arc<str>,
}

/// What a plan is found by: the domain, the path's keys and the canonical limits.
type PlanKey = (Arc<str>, Vec<String>, Arc<str>);

/// The service's overrides.
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    all: ArcSwap<Index>,
    any: AtomicBool,
    /// Writers one at a time; the plans in use, by what they are compiled from.
    plans: Mutex<HashMap<PlanKey, Arc<Plan>>>,
}

/// One change to apply to the index.
#[derive(Debug)]
pub(crate) struct Set<'a> {
    pub(crate) domain: &'a str,
    pub(crate) entries: &'a [(String, String)],
    /// The limits, as JSON; `None` removes the path's override.
    pub(crate) limits: Option<&'a serde_json::Value>,
    pub(crate) version: u64,
    pub(crate) by: &'a str,
    pub(crate) at_ms: u64,
}

impl Overrides {
    /// The snapshot in force now; `None` while there are no overrides.
    pub(crate) fn load(&self) -> Option<Snapshot> {
        self.any.load(Ordering::Acquire).then(|| self.all.load())
    }

    /// Every override now (for listing and saving: a snapshot, not a copy).
    pub(crate) fn snapshot(&self) -> Arc<Index> {
        self.all.load_full()
    }

    /// Applies `changes` in order as one swap, each prepared by `prepare`. A change
    /// older than the override it meets (a version at or below the path's) is passed
    /// over: the registry may hear of a change twice. Refused whole, nothing applied,
    /// when an override's limits do not compile.
    pub(crate) fn apply(
        &self,
        changes: &[Set<'_>],
        prepare: impl Fn(PolicySet) -> PolicySet,
    ) -> Result<(), Vec<OverrideError>> {
        let mut plans = self.plans.lock();
        let mut all = Index::clone(&self.all.load());
        for c in changes {
            let domain: Arc<str> = Arc::from(c.domain);
            let mut d = all.get(&domain).cloned().unwrap_or_default();
            let older = d
                .get(c.entries)
                .is_some_and(|e: &Arc<Entry>| e.version >= c.version);
            if older {
                continue;
            }
            match c.limits {
                Some(limits) => {
                    overrides::check_path(c.entries)?;
                    let plan = plan(&mut plans, &domain, c.entries, limits, &prepare)?;
                    let entry = Entry {
                        plan,
                        version: c.version,
                        by: Arc::from(c.by),
                        at_ms: c.at_ms,
                    };
                    d.insert(c.entries.to_vec(), Arc::new(entry));
                }
                None => {
                    d.remove(c.entries);
                }
            }
            if d.is_empty() {
                all.remove(&domain);
            } else {
                all.insert(domain, d);
            }
        }
        let any = !all.is_empty();
        self.all.store(Arc::new(all));
        self.any.store(any, Ordering::Release);
        // The plans no override uses any longer (one a reader's old snapshot still
        // holds goes at a later change).
        plans.retain(|_, p| Arc::strong_count(p) > 1);
        Ok(())
    }

    /// Replaces every override with `changes` (a full load), as one swap.
    pub(crate) fn replace(
        &self,
        changes: &[Set<'_>],
        prepare: impl Fn(PolicySet) -> PolicySet,
    ) -> Result<(), Vec<OverrideError>> {
        {
            let _writer = self.plans.lock();
            self.all.store(Arc::default());
        }
        self.apply(changes, prepare)
    }
}

/// The plan of `limits` over the keys of `entries`: one in use, or compiled now.
fn plan(
    plans: &mut HashMap<PlanKey, Arc<Plan>>,
    domain: &Arc<str>,
    entries: &[(String, String)],
    limits: &serde_json::Value,
    prepare: &impl Fn(PolicySet) -> PolicySet,
) -> Result<Arc<Plan>, Vec<OverrideError>> {
    let text: Arc<str> = Arc::from(limits.to_string());
    let keys: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
    let key = (Arc::clone(domain), keys, text);
    if let Some(p) = plans.get(&key) {
        return Ok(Arc::clone(p));
    }
    let keys: Vec<&str> = key.1.iter().map(String::as_str).collect();
    let compiled = overrides::plan(domain, &keys, limits)?;
    let set = spillway_policy::assemble([compiled]).map_err(|e| {
        vec![OverrideError {
            field: "limits".into(),
            message: e.to_string(),
        }]
    })?;
    let plan = Arc::new(Plan {
        set: prepare(set),
        limits: Arc::clone(&key.2),
    });
    plans.insert(key, Arc::clone(&plan));
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
        let plan = self.overridden(entries).map(|e| &e.plan);
        match plan.and_then(|p| p.set.domain(self.file.name())) {
            Some(overridden) => overridden.resolve(entries),
            None => self.file.resolve(entries),
        }
    }
}
