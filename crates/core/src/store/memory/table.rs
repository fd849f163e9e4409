//! One shard's table: the entries (one per key, holding the states of every limit
//! shape used with it), and how a full shard makes room — expired entries first, then
//! the least recently used sixteenth.

use hashbrown::HashTable;

use super::Inner;

use crate::Key;
use crate::algorithm::State;
use crate::limit::Shape;

#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) entries: HashTable<Entry>,
    pub(super) next_sweep: u64,
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) key: Key,
    pub(super) hash: u64,
    pub(super) last_used: u64,
    /// When every state of this key is the same as no state.
    pub(super) idle_at: u64,
    pub(super) first: (Shape, State),
    pub(super) more: Vec<(Shape, State)>,
}

// === impl Table ===

impl Table {
    /// Inserts a new entry for `key`, making room first if the shard is full.
    pub(super) fn insert<H>(
        &mut self,
        inner: &Inner<H>,
        key: &Key,
        hash: u64,
        shape: Shape,
        now: u64,
    ) -> &mut Entry {
        if now >= self.next_sweep {
            self.entries.retain(|e| e.idle_at > now);
            self.next_sweep = now.saturating_add(inner.sweep_interval);
        }
        if self.entries.len() >= inner.per_shard {
            self.make_room(inner.per_shard, now);
        }
        let entry = Entry {
            key: key.clone(),
            hash,
            last_used: now,
            idle_at: 0,
            first: (shape, State::default()),
            more: Vec::new(),
        };
        self.entries
            .insert_unique(hash, entry, |e| e.hash)
            .into_mut()
    }

    /// Drops expired entries; if none were, evicts the least recently used sixteenth.
    fn make_room(&mut self, per_shard: usize, now: u64) {
        self.entries.retain(|e| e.idle_at > now);
        if self.entries.len() < per_shard {
            return;
        }
        let evict = (per_shard / 16).max(1);
        let mut last_used: Vec<u64> = self.entries.iter().map(|e| e.last_used).collect();
        let cutoff = *last_used.select_nth_unstable(evict - 1).1;
        let mut evicted = 0;
        self.entries.retain(|e| {
            let old = evicted < evict && e.last_used <= cutoff;
            evicted += usize::from(old);
            !old
        });
    }
}

// === impl Entry ===

impl Entry {
    pub(super) fn state(&self, shape: Shape) -> Option<&State> {
        if self.first.0 == shape {
            return Some(&self.first.1);
        }
        self.more
            .iter()
            .find(|(s, _)| *s == shape)
            .map(|(_, state)| state)
    }

    pub(super) fn state_mut(&mut self, shape: Shape) -> &mut State {
        if self.first.0 == shape {
            return &mut self.first.1;
        }
        let i = match self.more.iter().position(|(s, _)| *s == shape) {
            Some(i) => i,
            None => {
                self.more.push((shape, State::default()));
                self.more.len() - 1
            }
        };
        &mut self.more[i].1
    }

    /// Clears `shape`'s state; true when the entry holds nothing any more.
    pub(super) fn remove_state(&mut self, shape: Shape) -> bool {
        if self.first.0 == shape {
            self.first.1 = State::default();
        }
        self.more.retain(|(s, _)| *s != shape);
        self.more.is_empty() && self.first.1 == State::default()
    }
}
