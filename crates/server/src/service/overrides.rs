//! Overrides (#63, in progress: kept in this process only for now; the store-backed
//! registry and the admin API come next): limits set as data for one exact descriptor
//! path of a domain ([`spillway_policy::overrides::Override`]). A request's path is
//! looked up among its domain's overrides first, then in the policy file's tree: an
//! override takes precedence for exactly its path, a sibling path keeps the file's
//! rules. A domain without overrides costs a request one empty-map check.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use spillway_policy::overrides::Override;
use spillway_policy::{Domain, Match, PolicySet};

/// Every domain's overrides: a snapshot swapped whole on each change (a request
/// decides on the snapshot it loaded), and whether there are any (while there are
/// none, a request does not even load the snapshot).
#[derive(Debug, Default)]
pub(crate) struct Overrides {
    all: ArcSwap<HashMap<String, DomainOverrides>>,
    any: AtomicBool,
}

/// A snapshot of every domain's overrides.
pub(crate) type Snapshot = arc_swap::Guard<Arc<HashMap<String, DomainOverrides>>>;

/// One domain's overrides, by path; each a one-path policy set prepared as the
/// service prepares its files (key prefix, reference rules' charging).
pub(crate) type DomainOverrides = HashMap<Vec<(String, String)>, Arc<PolicySet>>;

impl Overrides {
    /// The snapshot in force now; `None` while there are no overrides.
    pub(crate) fn load(&self) -> Option<Snapshot> {
        self.any.load(Ordering::Acquire).then(|| self.all.load())
    }

    /// Sets `o` for its domain and path (replacing one there), prepared by `prepare`.
    pub(crate) fn set(
        &self,
        domain: &str,
        o: Override,
        prepare: impl Fn(PolicySet) -> PolicySet,
    ) -> Result<(), String> {
        let entries = o.entries().to_vec();
        let set = spillway_policy::assemble([o.into_domain()]).map_err(|e| e.to_string())?;
        let set = Arc::new(prepare(set));
        let all = self.all.rcu(|all| {
            let mut all = HashMap::clone(all);
            all.entry(domain.to_owned())
                .or_default()
                .insert(entries.clone(), Arc::clone(&set));
            all
        });
        drop(all);
        self.any.store(true, Ordering::Release);
        Ok(())
    }

    /// Removes `domain`'s override of `entries`; whether there was one.
    pub(crate) fn remove(&self, domain: &str, entries: &[(String, String)]) -> bool {
        let mut removed = false;
        self.all.rcu(|all| {
            let mut all = HashMap::clone(all);
            if let Some(d) = all.get_mut(domain) {
                removed = d.remove(entries).is_some();
                if d.is_empty() {
                    all.remove(domain);
                }
            }
            all
        });
        self.any
            .store(!self.all.load().is_empty(), Ordering::Release);
        removed
    }
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

    /// The rules for `entries`: an override of exactly that path, else the file's.
    pub(crate) fn resolve(&self, entries: &[(String, String)]) -> Option<Match<'p>> {
        let set = self.overrides.and_then(|o| o.get(entries));
        match set.and_then(|s| s.domain(self.file.name())) {
            Some(overridden) => overridden.resolve(entries),
            None => self.file.resolve(entries),
        }
    }
}
