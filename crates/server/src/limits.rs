//! Limits as data (#63): the registry of overrides, set by the admin API
//! (`/v1/limits/{domain}`), kept where the service's store keeps state, and applied to
//! the service's index (`service/overrides.rs`).
//!
//! - **Kept.** On Redis: one hash per domain (field: the path, value: the record), a
//!   version counter and a log of the last [`LOG_MAX`] changes, every key under one
//!   hash tag (`{overrides}`), so that a change is one script call, atomic,
//!   on Cluster too (`kept/redis.rs`). On the memory store: a journal file beside the
//!   policies, one change a line, appended and synced before the change applies, and
//!   rewritten whole (a new file renamed over the old) when it holds more dead lines
//!   than live ones (`kept/journal.rs`).
//! - **Shared.** Every replica polls the version every [`POLL`] and reads the changes
//!   since the one it applied from the log (the whole registry again when it fell
//!   further behind than the log reaches); a replica that makes a change applies it
//!   before it answers. A restarted replica loads every override before it serves.
//! - **Audited.** A change is logged (`spillway::audit`: who, the path, before and
//!   after) and counted (`spillway_override_changes_total`) on the replica that made
//!   it; the last [`LOG_MAX`] changes are kept for `/v1/limits/{domain}/history`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use spillway_policy::overrides::{self, OverrideError};

use crate::service::Service;
use crate::service::overrides::Set;
pub use crate::service::overrides::path_text;

mod follower;
mod kept;

pub use follower::Follower;
pub use kept::Kept;

/// How often a replica asks the store for changes made elsewhere.
pub const POLL: Duration = Duration::from_millis(250);

/// The most changes the log keeps (and each replica's history): a replica further
/// behind than this loads the whole registry again.
pub const LOG_MAX: usize = 10_000;

/// The most overrides one page lists.
pub const PAGE_MAX: usize = 1000;

/// The longest bulk file one import takes (about 100,000 overrides of a plain path;
/// `spillway limits import` sends a longer file in parts).
pub const IMPORT_MAX_BYTES: usize = 32 * 1024 * 1024;

/// How many changes of an import are kept in one call (one script call on Redis, one
/// write and sync of the journal).
pub const IMPORT_PART: usize = 1000;

/// A path's new record (`None`: removed), as a registry writes it.
type PathSet = (Vec<(String, String)>, Option<Record>);

/// [`PathSet`] as a store writes it.
type PathWrite<'a> = (&'a [(String, String)], Option<Record>);

/// One entry of a path, as the API writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

/// One override as kept: its path, its limits, and the change that set it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// The registry's version of the change that set it (0 while being written: the
    /// store gives it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u64,
    pub domain: String,
    pub entries: Vec<Entry>,
    /// The limits, JSON as given (canonical: objects' fields in order, as the registry
    /// writes them), kept as text: a million overrides hold a million strings, not a
    /// million trees.
    pub limits: Box<serde_json::value::RawValue>,
    /// Who set it: `token`, `cert:<subject>`, or `anonymous`.
    pub by: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Record {
    /// Its path as the index keys it.
    pub fn path(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect()
    }
}

/// One change: an override set (`after`), replaced (`before` and `after`) or removed
/// (`before` alone).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Change {
    pub version: u64,
    pub by: String,
    pub at_ms: u64,
    pub before: Option<Record>,
    pub after: Option<Record>,
}

impl Change {
    /// The override it sets or removes.
    fn record(&self) -> &Record {
        self.after
            .as_ref()
            .or(self.before.as_ref())
            .expect("a change sets or removes an override")
    }

    /// `put` or `delete`.
    pub fn op(&self) -> &'static str {
        if self.after.is_some() {
            "put"
        } else {
            "delete"
        }
    }

    /// The change as the index applies it.
    fn as_set(&self, path: &[(String, String)]) -> SetOwned {
        let r = self.record();
        SetOwned {
            domain: r.domain.clone(),
            entries: path.to_vec(),
            limits: self.after.as_ref().map(|a| a.limits.get().to_owned()),
            version: self.version,
            by: r.by.clone(),
            at_ms: r.at_ms,
        }
    }
}

/// [`Set`] with what it borrows.
struct SetOwned {
    domain: String,
    entries: Vec<(String, String)>,
    limits: Option<String>,
    version: u64,
    by: String,
    at_ms: u64,
}

impl SetOwned {
    fn set(&self) -> Set<'_> {
        Set {
            domain: &self.domain,
            entries: &self.entries,
            limits: self.limits.as_deref(),
            version: self.version,
            by: &self.by,
            at_ms: self.at_ms,
        }
    }
}

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// The override is not valid: each field at fault (400).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<OverrideError>),
    /// No policy defines the domain (404).
    #[error("no domain {0} in the policies: an override refines a domain's rules")]
    UnknownDomain(String),
    /// The path has no override (404).
    #[error("no override of that path")]
    NotFound,
    /// Where overrides are kept did not answer or could not be written (503): nothing
    /// changed.
    #[error("overrides could not be kept: {0}")]
    Unavailable(String),
}

/// A page of a domain's overrides, in the order of their paths' text.
#[derive(Debug, Serialize)]
pub struct Page {
    pub overrides: Vec<Record>,
    /// The `after` of the next page, when there is one.
    pub next: Option<String>,
    /// How many overrides the domain has (matching the prefix or not).
    pub total: usize,
}

/// The registry of overrides.
pub struct Registry {
    service: Arc<Service>,
    kept: Kept,
    /// The last changes, oldest first.
    history: Mutex<VecDeque<Arc<Change>>>,
    /// The version applied; changes are applied one batch at a time.
    applied: tokio::sync::Mutex<u64>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// The registry of `service`'s overrides, kept by `kept`; empty until loaded
    /// ([`Registry::load`]).
    pub fn new(service: Arc<Service>, kept: Kept) -> Registry {
        Registry {
            service,
            kept,
            history: Mutex::default(),
            applied: tokio::sync::Mutex::new(0),
        }
    }

    /// Loads every kept override into the service. A journal that cannot be read
    /// stops the start (its overrides are limits); a store that does not answer is
    /// tried again by [`Registry::follow`].
    pub async fn load(&self) -> Result<(), String> {
        let mut applied = self.applied.lock().await;
        let (version, records, log) = self.kept.load_all().await.map_err(|e| e.to_string())?;
        let count = records.len();
        // Each record dropped as it is turned: a million are never held twice.
        let sets: Vec<SetOwned> = records
            .into_iter()
            .map(|r| SetOwned {
                entries: r.path(),
                limits: Some(String::from(r.limits.get())),
                domain: r.domain,
                version: r.version,
                by: r.by,
                at_ms: r.at_ms,
            })
            .collect();
        let sets: Vec<Set<'_>> = sets.iter().map(SetOwned::set).collect();
        self.service.apply_overrides(&sets, true).map_err(|e| {
            format!(
                "a kept override does not compile: {}",
                LimitsError::Invalid(e)
            )
        })?;
        *self.history.lock() = log.into_iter().map(Arc::new).collect();
        *applied = version;
        crate::metrics::overrides(self.service.overrides().values().map(|d| d.len()).sum());
        // Said when there are some: a service that never set one says nothing of them.
        if count > 0 {
            tracing::info!(
                target: "spillway_server",
                overrides = count,
                version,
                kept = self.kept.name(),
                "overrides loaded"
            );
        }
        Ok(())
    }

    /// Applies the changes made elsewhere since the last applied (every [`POLL`],
    /// until `stop`); loads everything again when the log no longer reaches back.
    pub async fn follow(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        if !self.kept.is_shared() {
            return;
        }
        let mut loaded = self.kept.loaded();
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = stop.cancelled() => return,
            }
            let result = if loaded {
                self.sync().await
            } else {
                self.load().await
            };
            match result {
                Ok(()) => loaded = true,
                Err(e) => {
                    crate::metrics::override_sync_failed();
                    tracing::warn!(target: "spillway_server", error = %e, "overrides not synced; the last known apply");
                }
            }
        }
    }

    /// Applies the changes the store has past the version applied.
    pub async fn sync(&self) -> Result<(), String> {
        let mut applied = self.applied.lock().await;
        match self.kept.since(*applied).await {
            Ok(Some(changes)) => {
                let Some(last) = changes.last().map(|c| c.version) else {
                    return Ok(());
                };
                self.apply(&changes);
                *applied = last;
                Ok(())
            }
            // Behind the log's reach: everything again.
            Ok(None) => {
                drop(applied);
                self.load().await
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Applies `changes` (in version order) to the service: at once, or, when one
    /// does not compile (kept by a newer release, say), one at a time, that one logged
    /// and passed over.
    fn apply(&self, changes: &[Change]) {
        let paths: Vec<_> = changes.iter().map(|c| c.record().path()).collect();
        let sets: Vec<SetOwned> = changes
            .iter()
            .zip(&paths)
            .map(|(c, p)| c.as_set(p))
            .collect();
        let all: Vec<Set<'_>> = sets.iter().map(SetOwned::set).collect();
        if self.service.apply_overrides(&all, false).is_err() {
            for (c, set) in changes.iter().zip(&all) {
                if let Err(e) = self
                    .service
                    .apply_overrides(std::slice::from_ref(set), false)
                {
                    tracing::error!(
                        target: "spillway_server",
                        version = c.version,
                        domain = %c.record().domain,
                        error = %LimitsError::Invalid(e),
                        "a kept override does not compile: passed over"
                    );
                }
            }
        }
        let mut history = self.history.lock();
        for c in changes {
            if history.len() >= LOG_MAX {
                history.pop_front();
            }
            history.push_back(Arc::new(c.clone()));
        }
        drop(history);
        crate::metrics::overrides(self.service.overrides().values().map(|d| d.len()).sum());
    }

    /// Sets `domain`'s override of `entries` to `limits`, by `by`: checked as strictly
    /// as a policy file, kept, applied here, then answered. The change made.
    pub async fn put(
        &self,
        domain: &str,
        entries: Vec<Entry>,
        limits: serde_json::Value,
        by: &str,
    ) -> Result<Change, LimitsError> {
        self.known(domain)?;
        let path: Vec<(String, String)> = entries
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect();
        // Compiled now, so that a bad override is refused before anything is kept.
        overrides::Override::compile(domain, &path, &limits).map_err(LimitsError::Invalid)?;
        let record = self.record(domain, &path, &limits, by);
        let mut made = self.write(domain, vec![(path, Some(record))], by).await?;
        self.made(&made).await;
        Ok(made.pop().expect("a set makes a change"))
    }

    /// Sets every override of a bulk file (NDJSON, one `PUT` body a line: checked whole
    /// first, [`overrides::bulk`]), by `by`, in parts of [`IMPORT_PART`] changes (each
    /// one atomic call on Redis; on a journal, one write and sync): how many were set.
    /// Refused whole when a line is at fault. When the store fails midway, the parts
    /// before are kept: importing the file again sets the same overrides.
    pub async fn import(&self, domain: &str, text: &str, by: &str) -> Result<usize, LimitsError> {
        self.known(domain)?;
        let lines = overrides::bulk(domain, text).map_err(LimitsError::Invalid)?;
        let mut done = 0;
        for part in lines.chunks(IMPORT_PART) {
            let changes = part
                .iter()
                .map(|l| {
                    let record = self.record(domain, &l.entries, &l.limits, by);
                    (l.entries.clone(), Some(record))
                })
                .collect();
            let made = self.write(domain, changes, by).await.map_err(|e| match e {
                LimitsError::Unavailable(why) => LimitsError::Unavailable(format!(
                    "{why} ({done} of {} set before; importing again sets the same)",
                    lines.len()
                )),
                other => other,
            })?;
            self.made(&made).await;
            done += part.len();
        }
        Ok(done)
    }

    /// The record of `domain`'s `path` set to `limits` by `by`, now.
    fn record(
        &self,
        domain: &str,
        path: &[(String, String)],
        limits: &serde_json::Value,
        by: &str,
    ) -> Record {
        Record {
            version: 0,
            domain: domain.to_owned(),
            entries: entries_of(path),
            limits: serde_json::value::RawValue::from_string(limits.to_string())
                .expect("a JSON value's text is JSON"),
            by: by.to_owned(),
            at_ms: self.service.now().as_micros() / 1000,
        }
    }

    /// Removes `domain`'s override of `path`, by `by`: the file's rules apply again.
    pub async fn delete(
        &self,
        domain: &str,
        path: &[(String, String)],
        by: &str,
    ) -> Result<Change, LimitsError> {
        let mut made = self.write(domain, vec![(path.to_vec(), None)], by).await?;
        self.made(&made).await;
        made.pop().ok_or(LimitsError::NotFound)
    }

    /// Keeps each of `domain`'s paths set to its record (`None`: removed), in order:
    /// the changes made (a removal of a path without an override makes none). On a
    /// journal, this process is the only writer: the changes are written and applied
    /// under the lock, in version order, with the index's records as their `before`.
    async fn write(
        &self,
        domain: &str,
        changes: Vec<PathSet>,
        by: &str,
    ) -> Result<Vec<Change>, LimitsError> {
        let at_ms = self.service.now().as_micros() / 1000;
        if self.kept.is_shared() {
            let changes: Vec<_> = changes
                .iter()
                .map(|(p, a)| (p.as_slice(), a.clone()))
                .collect();
            return self.kept.write(domain, &changes, by, at_ms).await;
        }
        let mut applied = self.applied.lock().await;
        let changes: Vec<_> = changes
            .into_iter()
            .map(|(path, after)| (self.get(domain, &path), after))
            .filter(|(before, after)| before.is_some() || after.is_some())
            .collect();
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let made = self.kept.append(*applied + 1, changes, by, at_ms)?;
        self.apply(&made);
        *applied = made.last().map_or(*applied, |c| c.version);
        let live = self.service.overrides().values().map(|d| d.len()).sum();
        self.kept.compact(live, *applied, || self.all_records());
        Ok(made)
    }

    /// Every override, as kept (a journal rewritten whole writes them).
    fn all_records(&self) -> Vec<Record> {
        let all = self.service.overrides();
        all.iter()
            .flat_map(|(domain, d)| d.iter().map(|(path, e)| record_of(domain, &path, e)))
            .collect()
    }

    /// Changes this replica made, kept: applied here before they are answered (on a
    /// shared store, with the changes made elsewhere before them, in order), audited
    /// (a line each), counted.
    async fn made(&self, changes: &[Change]) {
        if self.kept.is_shared()
            && let Err(e) = self.sync().await
        {
            tracing::warn!(target: "spillway_server", error = %e, "overrides not synced after a change; applied alone");
            self.apply(changes);
        }
        for change in changes {
            let r = change.record();
            crate::metrics::override_change(change.op());
            tracing::info!(
                target: "spillway::audit",
                version = change.version,
                by = %change.by,
                op = change.op(),
                domain = %r.domain,
                path = %path_text(&r.path()),
                before = change.before.as_ref().map_or("none", |b| b.limits.get()),
                after = change.after.as_ref().map_or("none", |a| a.limits.get()),
                "override changed"
            );
        }
    }

    /// Refused unless the policies define `domain`.
    fn known(&self, domain: &str) -> Result<(), LimitsError> {
        match self.service.policies().domain(domain) {
            Some(_) => Ok(()),
            None => Err(LimitsError::UnknownDomain(domain.to_owned())),
        }
    }

    /// `domain`'s override of exactly `path`.
    pub fn get(&self, domain: &str, path: &[(String, String)]) -> Option<Record> {
        let all = self.service.overrides();
        let e = all.get(domain)?.get(path)?;
        Some(record_of(domain, path, e))
    }

    /// A page of `domain`'s overrides whose path's text starts with `prefix`, after
    /// the path `after`, at most `limit` of them ([`PAGE_MAX`] at most).
    pub fn page(&self, domain: &str, prefix: &str, after: Option<&str>, limit: usize) -> Page {
        let all = self.service.overrides();
        let Some(d) = all.get(domain) else {
            return Page {
                overrides: Vec::new(),
                next: None,
                total: 0,
            };
        };
        let limit = limit.clamp(1, PAGE_MAX);
        // The `limit + 1` first past `after` in text order: a bounded heap over one
        // pass, not a sort of them all.
        let mut first = std::collections::BinaryHeap::new();
        for (path, e) in d.iter() {
            let text = path_text(&path);
            if !text.starts_with(prefix) || after.is_some_and(|a| text.as_str() <= a) {
                continue;
            }
            if first.len() <= limit {
                first.push(Ranked(text, path, Arc::clone(e)));
            } else if first.peek().is_some_and(|r| text < r.0) {
                first.pop();
                first.push(Ranked(text, path, Arc::clone(e)));
            }
        }
        let mut first = first.into_sorted_vec();
        let next = (first.len() > limit).then(|| {
            first.truncate(limit);
            first.last().map(|r| r.0.clone()).unwrap_or_default()
        });
        Page {
            overrides: first
                .iter()
                .map(|r| record_of(domain, &r.1, &r.2))
                .collect(),
            next,
            total: d.len(),
        }
    }

    /// The last changes of `domain`'s `path`, newest first, at most `limit`.
    pub fn history(&self, domain: &str, path: &[(String, String)], limit: usize) -> Vec<Change> {
        self.history
            .lock()
            .iter()
            .rev()
            .filter(|c| {
                let r = c.record();
                r.domain == domain && r.path() == path
            })
            .take(limit)
            .map(|c| Change::clone(c))
            .collect()
    }
}

/// An override in a page, ranked by its path's text.
struct Ranked(
    String,
    Vec<(String, String)>,
    Arc<crate::service::overrides::Entry>,
);

impl PartialEq for Ranked {
    fn eq(&self, other: &Ranked) -> bool {
        self.0 == other.0
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Ranked) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Ranked) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// `path` as the API writes it (the inverse of [`Record::path`]).
fn entries_of(path: &[(String, String)]) -> Vec<Entry> {
    path.iter()
        .map(|(key, value)| Entry {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// The record of the index's `e`.
fn record_of(
    domain: &str,
    path: &[(String, String)],
    e: &crate::service::overrides::Entry,
) -> Record {
    Record {
        version: e.version,
        domain: domain.to_owned(),
        entries: entries_of(path),
        limits: serde_json::value::RawValue::from_string(e.limits().to_owned())
            .expect("an override's limits are JSON (they compiled)"),
        by: e.by.to_string(),
        at_ms: e.at_ms,
    }
}
