//! Where overrides are kept: a journal file of this process, or Redis, shared by every
//! replica.

use std::path::PathBuf;

use spillway_redis::RedisStore;

use super::{Change, LimitsError, PathWrite, Record};

mod journal;
mod redis;

/// Where overrides are kept.
pub enum Kept {
    /// A journal file beside the policies (or, without one, this process alone).
    Journal(journal::Journal),
    /// Redis: every replica's.
    Redis(redis::RedisKept),
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// What a load finds: the version, every override, and the last changes (oldest first).
type Loaded = (u64, Vec<Record>, Vec<Change>);

impl Kept {
    /// In the journal at `path` (`None`: in this process only, lost at exit).
    pub fn journal(path: Option<PathBuf>) -> Kept {
        Kept::Journal(journal::Journal::new(path))
    }

    /// In Redis, through `store` (a connection of the registry's own), under
    /// `key_prefix`.
    pub fn redis(store: RedisStore, key_prefix: &str) -> Kept {
        Kept::Redis(redis::RedisKept::new(store, key_prefix))
    }

    /// For logs: the journal's file, or Redis.
    pub fn name(&self) -> String {
        match self {
            Kept::Journal(j) => j.name(),
            Kept::Redis(_) => "redis".into(),
        }
    }

    /// Whether other replicas change these overrides too (the registry then polls).
    pub(super) fn is_shared(&self) -> bool {
        matches!(self, Kept::Redis(_))
    }

    /// Whether a load has succeeded.
    pub(super) fn loaded(&self) -> bool {
        match self {
            Kept::Journal(_) => true,
            Kept::Redis(r) => r.loaded(),
        }
    }

    pub(super) async fn load_all(&self) -> Result<Loaded, String> {
        match self {
            Kept::Journal(j) => j.load(),
            Kept::Redis(r) => r.load().await,
        }
    }

    /// The changes past `version`, in order; `None` when the log no longer reaches
    /// back that far.
    pub(super) async fn since(&self, version: u64) -> Result<Option<Vec<Change>>, String> {
        match self {
            Kept::Journal(_) => Ok(Some(Vec::new())),
            Kept::Redis(r) => r.since(version).await,
        }
    }

    /// On a shared store: each of `domain`'s paths set to its record (`None`:
    /// removed), in order, in one atomic call that gives the versions and reads the
    /// `before`s. The changes made.
    pub(super) async fn write(
        &self,
        domain: &str,
        changes: &[PathWrite<'_>],
        by: &str,
        at_ms: u64,
    ) -> Result<Vec<Change>, LimitsError> {
        match self {
            Kept::Redis(r) => r.write(domain, changes, by, at_ms).await,
            Kept::Journal(_) => unreachable!("a journal is written under the registry's lock"),
        }
    }

    /// On a journal: the changes `(before, after)`, versions from `version` on,
    /// appended and synced at once.
    pub(super) fn append(
        &self,
        version: u64,
        changes: Vec<(Option<Record>, Option<Record>)>,
        by: &str,
        at_ms: u64,
    ) -> Result<Vec<Change>, LimitsError> {
        let Kept::Journal(j) = self else {
            unreachable!("a shared store is written by `write`")
        };
        let changes: Vec<Change> = changes
            .into_iter()
            .zip(version..)
            .map(|((before, after), version)| Change {
                version,
                by: by.to_owned(),
                at_ms,
                before,
                after: after.map(|a| Record { version, ..a }),
            })
            .collect();
        j.append(&changes).map_err(LimitsError::Unavailable)?;
        Ok(changes)
    }

    /// On a journal holding more dead lines than `live` ones: rewritten whole from
    /// `all` (the overrides now, at `version`).
    pub(super) fn compact(&self, live: usize, version: u64, all: impl FnOnce() -> Vec<Record>) {
        if let Kept::Journal(j) = self
            && j.due(live)
            && let Err(e) = j.rewrite(version, &all())
        {
            tracing::warn!(target: "spillway_server", journal = %j.name(), error = %e, "the overrides' journal was not rewritten; it keeps growing");
        }
    }
}
