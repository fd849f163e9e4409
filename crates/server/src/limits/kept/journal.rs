//! Overrides kept by this process alone (the memory store): a journal file beside the
//! policies, one change a JSON line, appended and synced before the change applies.
//! A start replays it. When it holds more dead lines than live ones it is rewritten
//! whole: a new file, synced, renamed over the old one, so that a crash leaves the old
//! journal or the new one, never half of one. A last line cut short by a crash (no
//! newline) was never applied: it is passed over, and cut off at the next write.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::super::{Change, LOG_MAX, Record};
use super::Loaded;

/// A journal's line: a change, or (first in a rewritten journal) the version reached.
/// Read as one or the other by hand: serde's untagged enums cannot hold a change's raw
/// limits, and a change must never be read as a mark.
#[derive(Serialize)]
#[serde(untagged)]
enum Line {
    Change(Box<Change>),
    Mark { version: u64 },
}

/// The first line of a rewritten journal.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Mark {
    version: u64,
}

impl Line {
    fn parse(text: &str) -> Result<Line, serde_json::Error> {
        match serde_json::from_str::<Change>(text) {
            Ok(c) => Ok(Line::Change(Box::new(c))),
            Err(e) => match serde_json::from_str::<Mark>(text) {
                Ok(m) => Ok(Line::Mark { version: m.version }),
                Err(_) => Err(e),
            },
        }
    }
}

/// The journal (or nothing: this process only).
#[derive(Debug)]
pub struct Journal {
    path: Option<PathBuf>,
    /// Lines written, and the file once open for appending.
    state: Mutex<(usize, Option<File>)>,
}

impl Journal {
    pub(super) fn new(path: Option<PathBuf>) -> Journal {
        Journal {
            path,
            state: Mutex::default(),
        }
    }

    pub(super) fn name(&self) -> String {
        self.path.as_ref().map_or_else(
            || "this process (no journal)".into(),
            |p| format!("journal {}", p.display()),
        )
    }

    /// Replays the journal: the version reached, the overrides, the last changes.
    /// A journal not there yet is empty; one that cannot be read, or holds a line that
    /// is not a change (but a last one cut short), is an error naming the line.
    pub(super) fn load(&self) -> Result<Loaded, String> {
        let Some(path) = &self.path else {
            return Ok((0, Vec::new(), Vec::new()));
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let mut version = 0;
        let mut live: std::collections::HashMap<(String, Vec<(String, String)>), Record> =
            Default::default();
        let mut log = std::collections::VecDeque::new();
        let mut lines = 0;
        let mut whole = 0;
        for (n, line) in text.split_inclusive('\n').enumerate() {
            if !line.ends_with('\n') {
                tracing::warn!(target: "spillway_server", journal = %path.display(), line = n + 1, "the journal's last line was cut short (a crash while writing it): passed over");
                break;
            }
            whole += line.len();
            lines += 1;
            let parsed =
                Line::parse(line).map_err(|e| format!("{} line {}: {e}", path.display(), n + 1))?;
            match parsed {
                Line::Mark { version: v } => version = version.max(v),
                Line::Change(c) => {
                    let c = *c;
                    version = version.max(c.version);
                    match (&c.after, &c.before) {
                        (Some(a), _) => {
                            live.insert((a.domain.clone(), a.path()), a.clone());
                        }
                        (None, Some(b)) => {
                            live.remove(&(b.domain.clone(), b.path()));
                        }
                        (None, None) => {}
                    }
                    if log.len() >= LOG_MAX {
                        log.pop_front();
                    }
                    log.push_back(c);
                }
            }
        }
        // A line cut short goes: the next change starts a line of its own.
        if whole < text.len() {
            OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(whole as u64))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        *self.state.lock() = (lines, None);
        Ok((version, live.into_values().collect(), log.into()))
    }

    /// Appends `changes` and syncs them to disk.
    pub(super) fn append(&self, changes: &[Change]) -> Result<(), String> {
        let mut state = self.state.lock();
        let (lines, file) = &mut *state;
        let Some(path) = &self.path else {
            return Ok(());
        };
        // Made at the first change: a service that never sets one leaves no file.
        let file = match file {
            Some(f) => f,
            None => file.insert(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?,
            ),
        };
        let mut text = String::new();
        for change in changes {
            text.push_str(&serde_json::to_string(change).map_err(|e| e.to_string())?);
            text.push('\n');
        }
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        *lines += changes.len();
        Ok(())
    }

    /// Whether the journal holds more dead lines than `live` ones (and enough to be
    /// worth a rewrite).
    pub(super) fn due(&self, live: usize) -> bool {
        let lines = self.state.lock().0;
        self.path.is_some() && lines > 2 * live + 1024
    }

    /// Rewrites the journal as `all`'s overrides at `version`: a new file beside it,
    /// synced, renamed over it.
    pub(super) fn rewrite(&self, version: u64, all: &[Record]) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut state = self.state.lock();
        let fresh = path.with_extension("rewrite");
        let io = |e: std::io::Error| format!("{}: {e}", fresh.display());
        let mut out = std::io::BufWriter::new(File::create(&fresh).map_err(io)?);
        let mut write = |line: &Line| -> Result<(), String> {
            let mut text = serde_json::to_string(line).map_err(|e| e.to_string())?;
            text.push('\n');
            out.write_all(text.as_bytes()).map_err(io)
        };
        write(&Line::Mark { version })?;
        for r in all {
            write(&Line::Change(Box::new(Change {
                version: r.version,
                by: r.by.clone(),
                at_ms: r.at_ms,
                before: None,
                after: Some(r.clone()),
            })))?;
        }
        let file = out.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&fresh, path).map_err(io)?;
        let file = OpenOptions::new().append(true).open(path).map_err(io)?;
        *state = (all.len() + 1, Some(file));
        Ok(())
    }
}
