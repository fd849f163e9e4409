//! Hot reload: watch the policy file or directory, and on a change load everything
//! again. A good load is swapped in whole; a bad one is logged and exported, and the
//! last good configuration keeps serving. Counters live in the store, keyed by domain
//! and descriptor, so a reload never resets them. The served TLS certificates reload
//! the same way, on a change to their files and on SIGHUP.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::metrics;
use crate::state::AppState;
use crate::tls::Certs;

/// Changes closer together than this are one reload (an editor's save is several events).
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Which policy set a watched path holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Set {
    /// The policies that answer.
    Live,
    /// The candidate policies, decided in shadow.
    Candidate,
}

/// Loads the policies again and swaps them in if they are good.
pub async fn reload(state: &AppState, path: &Path, set: Set) {
    let owned = path.to_owned();
    let options = state.load_options;
    let loaded =
        tokio::task::spawn_blocking(move || spillway_policy::load_with(owned, options)).await;
    let result = match loaded {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the load task failed: {e}")),
    };
    apply(state, set, result, &path.display().to_string());
}

/// Swaps `result` in as `set` if it is a good set, or keeps the last good one; logs,
/// counts and records either way (`from` names the source: a path, or the xDS server
/// and version). Whether it was swapped in.
pub(crate) fn apply(
    state: &AppState,
    set: Set,
    result: Result<spillway_policy::PolicySet, String>,
    from: &str,
) -> bool {
    let error = match result {
        Ok(policies) => {
            let domains = policies.domains().len();
            match set {
                Set::Live => {
                    state.service.replace_policies(policies);
                    metrics::config_load(true, domains);
                    state.service.stats().config_load(true);
                }
                Set::Candidate => state.service.replace_candidate(policies),
            }
            tracing::info!(from, domains, ?set, "policies loaded");
            None
        }
        Err(e) => {
            if set == Set::Live {
                metrics::config_load(false, 0);
                state.service.stats().config_load(false);
            }
            tracing::error!(from, error = %e, ?set, "policies not loaded; the last good ones stay");
            Some(e)
        }
    };
    let ok = error.is_none();
    let status = match set {
        Set::Live => &state.load_status,
        Set::Candidate => &state.candidate_status,
    };
    status.send_modify(|status| {
        status.generation += 1;
        status.error = error;
    });
    ok
}

/// Whether an event can change what the files say. A read is not: loading the policies
/// reads them, so two services watching one directory would otherwise reload each
/// other for ever (seen: 100 reloads a second each, and every reload empties the deny
/// cache).
fn is_change(kind: &EventKind) -> bool {
    match kind {
        // Written, then closed: a save.
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Watches `path` and reloads `set` from it on every change until `shutdown`.
pub fn watch(
    state: Arc<AppState>,
    path: PathBuf,
    set: Set,
    shutdown: CancellationToken,
) -> Result<(), notify::Error> {
    // A directory is watched as a whole (new files, renames, Kubernetes' symlink swaps);
    // a single file through its directory, since editors replace files by renaming.
    let target = if path.is_dir() {
        path.clone()
    } else {
        path.parent().map_or(path.clone(), Path::to_path_buf)
    };
    let (debouncer, mut rx) = changes(&[target])?;
    tokio::spawn(async move {
        let _debouncer = debouncer; // watching stops when it drops
        loop {
            tokio::select! {
                event = rx.recv() => {
                    if event.is_none() {
                        break;
                    }
                    reload(&state, &path, set).await;
                }
                () = shutdown.cancelled() => break,
            }
        }
    });
    Ok(())
}

/// While the last reload of the served certificates failed, it is tried again after
/// this long, doubling up to [`TLS_RETRY_MAX`]: a pair that was not valid yet (a few
/// seconds of clock skew), or was being written, is taken up without waiting for
/// another file event (issue #37: a failed reload was never tried again).
pub const TLS_RETRY_FIRST: Duration = Duration::from_secs(1);
pub const TLS_RETRY_MAX: Duration = Duration::from_secs(30);

/// Reloads the served certificates when their files change (through their
/// directories: Kubernetes swaps a symlinked directory), on SIGHUP, and again and again
/// while the last reload failed ([`TLS_RETRY_FIRST`]), until `shutdown`.
pub fn watch_tls(certs: Arc<Certs>, shutdown: CancellationToken) -> Result<(), notify::Error> {
    let mut dirs: Vec<PathBuf> = certs
        .paths()
        .iter()
        .map(|p| p.parent().map_or(p.clone(), Path::to_path_buf))
        .map(|d| {
            if d.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                d
            }
        })
        .collect();
    dirs.sort();
    dirs.dedup();
    let (debouncer, mut rx) = changes(&dirs)?;
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(notify::Error::io)?;
    tokio::spawn(async move {
        let _debouncer = debouncer;
        // Set while the last reload failed: when to try again.
        let mut retry: Option<Duration> = None;
        loop {
            let again = async {
                match retry {
                    Some(after) => tokio::time::sleep(after).await,
                    None => std::future::pending().await,
                }
            };
            let retrying = tokio::select! {
                event = rx.recv() => {
                    if event.is_none() {
                        break;
                    }
                    false
                }
                _ = hangup.recv() => {
                    tracing::info!("SIGHUP: reloading the TLS certificates");
                    false
                }
                () = again => true,
                () = shutdown.cancelled() => break,
            };
            let certs = Arc::clone(&certs);
            let loaded = tokio::task::spawn_blocking(move || certs.reload().is_ok())
                .await
                .unwrap_or(false);
            retry = match (loaded, retry) {
                (true, _) => None,
                (false, Some(after)) if retrying => Some((after * 2).min(TLS_RETRY_MAX)),
                (false, _) => Some(TLS_RETRY_FIRST),
            };
        }
    });
    Ok(())
}

type Debouncer = notify_debouncer_full::Debouncer<
    notify::RecommendedWatcher,
    notify_debouncer_full::RecommendedCache,
>;

/// A watch on `dirs` (not recursive): one message per debounced change.
fn changes(dirs: &[PathBuf]) -> Result<(Debouncer, mpsc::UnboundedReceiver<()>), notify::Error> {
    let (tx, rx) = mpsc::unbounded_channel::<()>();
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        if result.is_ok_and(|events| events.iter().any(|e| is_change(&e.kind))) {
            let _ = tx.send(());
        }
    })?;
    for dir in dirs {
        debouncer.watch(dir, RecursiveMode::NonRecursive)?;
    }
    Ok((debouncer, rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind, RemoveKind};

    #[test]
    fn reads_are_not_changes() {
        assert!(!is_change(&EventKind::Access(AccessKind::Read)));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(is_change(&EventKind::Modify(ModifyKind::Any)));
        assert!(is_change(&EventKind::Create(CreateKind::File)));
        assert!(is_change(&EventKind::Remove(RemoveKind::File)));
        assert!(is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
    }
}
