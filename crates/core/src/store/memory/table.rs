//! One shard's table: the entries (one per key), where each keeps its state, and how a
//! full shard makes room — expired entries first, then the least recently used
//! sixteenth.
//!
//! An entry is 24 bytes: the key (one pointer), its last use, and one state inline
//! when the key has a single state of a fixed-size algorithm whose numbers fit
//! ([`Packed`]; every GCRA, and fixed windows and token buckets below 2^32 in count or
//! scaled level). Otherwise its states live out of line, in the shard's slab: a key
//! used with several limit shapes, the heap algorithms (logs, sub-window buckets,
//! members), and numbers too large to pack.
//!
//! Last use is the shard's use count, so eviction follows the order of use exactly
//! (two uses in one microsecond, or on a clock that stepped back, keep their order).

use hashbrown::HashTable;
use slab::Slab;

use arcstr::ArcStr;

use super::{HashKeys, Inner};

use crate::Key;
use crate::algorithm::{Packed, State};
use crate::limit::{Kind, MAX_SHAPE_ID, Shape, Shapes};

#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) entries: HashTable<Entry>,
    /// The states of entries that do not hold theirs inline.
    pub(super) spills: Spills,
    /// Bytes of the entries' key texts (each held once, by its entry).
    key_bytes: usize,
    /// Uses so far (renumbered when it would overflow): every use takes the next.
    uses: u32,
    pub(super) next_sweep: u64,
    /// Entries inserted since the last sweep.
    inserted: usize,
}

#[derive(Debug)]
pub(super) struct Entry {
    /// The key's text (`Key::text`): one pointer.
    pub(super) key: ArcStr,
    /// The shard's use count when the key was last used.
    pub(super) used: u32,
    /// Bits 0..11: the inline state's shape number, or 0 when the states are out of line
    /// (`word` is then their index in the slab). Above: the state's `Packed::high`.
    head: u32,
    word: u64,
}

/// States out of line: one per limit shape used with the key.
#[derive(Debug, Default)]
pub(super) struct Spill {
    states: Vec<(Shape, State)>,
    /// When every state is the same as no state (µs).
    idle_at: u64,
}

impl Spill {
    /// Bytes it takes, its states' heap included.
    fn bytes(&self) -> usize {
        std::mem::size_of::<Spill>() + self.states.iter().map(|(_, s)| s.bytes()).sum::<usize>()
    }
}

/// The shard's out-of-line states, and the bytes they take (kept as they change).
#[derive(Debug, Default)]
pub(super) struct Spills {
    slab: Slab<Spill>,
    bytes: usize,
}

impl Spills {
    fn insert(&mut self, spill: Spill) -> usize {
        self.bytes += spill.bytes();
        self.slab.insert(spill)
    }

    fn remove(&mut self, i: usize) {
        let spill = self.slab.remove(i);
        self.bytes -= spill.bytes();
    }

    /// Changes spill `i` with `f`, counting what it grew or shrank by.
    fn edit<R>(&mut self, i: usize, f: impl FnOnce(&mut Spill) -> R) -> R {
        let spill = &mut self.slab[i];
        let before = spill.bytes();
        let r = f(spill);
        self.bytes = self.bytes - before + spill.bytes();
        r
    }
}

impl std::ops::Index<usize> for Spills {
    type Output = Spill;
    fn index(&self, i: usize) -> &Spill {
        &self.slab[i]
    }
}

/// Bytes an entry's key text takes, as `MemoryStore::footprint` counts them.
fn key_bytes(key: &ArcStr) -> usize {
    key.len()
}

const ID_BITS: u32 = 11;

/// `state` packed for an inline entry, when it can be.
#[inline]
fn pack(shape: Shape, state: &State) -> Option<Packed> {
    if shape.id() == 0 || shape.kind() == Kind::Heap {
        return None;
    }
    state.pack()
}
const ID_MASK: u32 = (1 << ID_BITS) - 1;
const _: () = assert!(
    MAX_SHAPE_ID as u32 == ID_MASK,
    "every shape number fits its bits"
);

// === impl Table ===

impl Table {
    /// The next use's number. At the last number, renumbers every entry by rank
    /// (keeping their order) first.
    #[inline]
    pub(super) fn tick(&mut self) -> u32 {
        if self.uses == u32::MAX {
            let mut used: Vec<u32> = self.entries.iter().map(|e| e.used).collect();
            used.sort_unstable();
            for e in self.entries.iter_mut() {
                e.used = used.partition_point(|&u| u < e.used) as u32;
            }
            self.uses = used.len() as u32;
        }
        self.uses += 1;
        self.uses
    }

    /// Bytes the shard holds: its entries, their key texts, their out-of-line states.
    pub(super) fn bytes(&self) -> usize {
        self.entries.len() * std::mem::size_of::<Entry>() + self.key_bytes + self.spills.bytes
    }

    /// Whether a shard of at most `keys` keys and `bytes` bytes is full.
    fn full(&self, keys: usize, bytes: usize) -> bool {
        self.entries.len() >= keys || self.bytes() >= bytes
    }

    /// Inserts a new entry for `key` holding `state` of `shape` (idle at `idle_at` µs),
    /// making room first if the shard is full (in keys or in bytes).
    #[allow(clippy::too_many_arguments)] // the entry's parts, each one given once
    pub(super) fn insert<H: HashKeys>(
        &mut self,
        inner: &Inner<H>,
        key: &Key,
        hash: u64,
        shape: Shape,
        state: State,
        idle_at: u64,
        now: u64,
    ) -> &mut Entry {
        // A sweep reads every entry: at most once per interval, and only once a
        // sixteenth of the shard is new since the last, so that its cost per insert
        // stays bounded however large the shard and however slow the inserts.
        self.inserted += 1;
        if now >= self.next_sweep && self.inserted * 16 >= self.entries.len() {
            self.purge(now);
            self.next_sweep = now.saturating_add(inner.sweep_interval);
        }
        if self.full(inner.per_shard, inner.per_shard_bytes) {
            self.make_room(inner.per_shard, inner.per_shard_bytes, now);
        }
        let used = self.tick();
        self.key_bytes += key_bytes(key.text());
        let entry = Entry::new(
            key.text().clone(),
            used,
            shape,
            state,
            idle_at,
            &mut self.spills,
        );
        self.entries
            .insert_unique(hash, entry, |e| inner.hasher.hash_text(&e.key))
            .into_mut()
    }

    /// Drops the entries whose states have all expired by `now`; returns how many.
    pub(super) fn purge(&mut self, now: u64) -> usize {
        self.inserted = 0;
        let before = self.entries.len();
        let shapes = Shapes::read();
        let (spills, key_bytes_held) = (&mut self.spills, &mut self.key_bytes);
        self.entries.retain(|e| {
            let keep = e.idle_at(&shapes, spills) > now;
            if !keep {
                e.release(spills);
                *key_bytes_held -= key_bytes(&e.key);
            }
            keep
        });
        before - self.entries.len()
    }

    /// Drops expired entries; while the shard is still full (in keys or bytes), evicts
    /// the least recently used sixteenth.
    fn make_room(&mut self, per_shard: usize, per_shard_bytes: usize, now: u64) {
        self.purge(now);
        while self.full(per_shard, per_shard_bytes) && !self.entries.is_empty() {
            let evict = (self.entries.len() / 16).max(1);
            let mut used: Vec<u32> = self.entries.iter().map(|e| e.used).collect();
            let cutoff = *used.select_nth_unstable(evict - 1).1;
            let (spills, key_bytes_held) = (&mut self.spills, &mut self.key_bytes);
            // Use numbers are distinct: exactly `evict` entries are at or below the cutoff.
            self.entries.retain(|e| {
                let keep = e.used > cutoff;
                if !keep {
                    e.release(spills);
                    *key_bytes_held -= key_bytes(&e.key);
                }
                keep
            });
        }
    }

    /// Forgets that `entry` (just taken out of the table) held its key.
    pub(super) fn removed(&mut self, entry: &Entry) {
        self.key_bytes -= key_bytes(&entry.key);
    }
}

// === impl Entry ===

impl Entry {
    #[inline]
    fn id(&self) -> u16 {
        (self.head & ID_MASK) as u16
    }

    /// Whether the entry holds `shape`'s state inline.
    #[inline]
    pub(super) fn holds_inline(&self, shape: Shape) -> bool {
        shape.id() != 0 && self.id() == shape.id()
    }

    /// The slab index of the entry's states, when they are out of line.
    #[inline]
    fn spill(&self) -> Option<usize> {
        (self.id() == 0).then_some(self.word as usize)
    }

    #[inline]
    fn packed(&self) -> Packed {
        Packed {
            word: self.word,
            high: self.head >> ID_BITS,
        }
    }

    /// The inline state, of `shape` (see [`holds_inline`](Entry::holds_inline)).
    #[inline]
    pub(super) fn load(&self, shape: Shape) -> State {
        State::unpack(shape.kind(), self.packed())
    }

    /// A new entry holding `state` of `shape` (idle at `idle_at` µs).
    fn new(
        key: ArcStr,
        used: u32,
        shape: Shape,
        state: State,
        idle_at: u64,
        spills: &mut Spills,
    ) -> Entry {
        let mut entry = Entry {
            key,
            used,
            head: 0,
            word: 0,
        };
        match pack(shape, &state) {
            Some(packed) => entry.set(shape, packed),
            None => {
                entry.word = spills.insert(Spill {
                    states: vec![(shape, state)],
                    idle_at,
                }) as u64;
            }
        }
        entry
    }

    #[inline]
    fn set(&mut self, shape: Shape, packed: Packed) {
        self.head = u32::from(shape.id()) | (packed.high << ID_BITS);
        self.word = packed.word;
    }

    /// Sets `shape`'s state (idle at `idle_at` µs, or earlier for the others): inline
    /// when it can be, else out of line (moving the inline state there first).
    #[inline]
    pub(super) fn put(&mut self, shape: Shape, state: State, idle_at: u64, spills: &mut Spills) {
        if self.holds_inline(shape)
            && let Some(packed) = pack(shape, &state)
        {
            self.set(shape, packed);
            return;
        }
        let i = self.spill_out(spills);
        spills.edit(i, |spill| {
            spill.idle_at = spill.idle_at.max(idle_at);
            match spill.states.iter_mut().find(|(s, _)| *s == shape) {
                Some((_, s)) => *s = state,
                None => spill.states.push((shape, state)),
            }
        });
    }

    /// A copy of `shape`'s state, if the entry holds one.
    pub(super) fn state(&self, shape: Shape, spills: &Spills) -> Option<State> {
        if self.holds_inline(shape) {
            return Some(self.load(shape));
        }
        let spill = &spills[self.spill()?];
        spill
            .states
            .iter()
            .find(|(s, _)| *s == shape)
            .map(|(_, state)| state.clone())
    }

    /// `shape`'s state, for a batch to decide on: taken out of line (no state left in its
    /// place), or a copy of the inline one; [`put`](Entry::put) sets it back.
    pub(super) fn take(&mut self, shape: Shape, spills: &mut Spills) -> Option<State> {
        if self.holds_inline(shape) {
            return Some(self.load(shape));
        }
        spills.edit(self.spill()?, |spill| {
            spill
                .states
                .iter_mut()
                .find(|(s, _)| *s == shape)
                .map(|(_, state)| std::mem::take(state))
        })
    }

    /// Moves the states out of line (if they are not already); returns their index.
    fn spill_out(&mut self, spills: &mut Spills) -> usize {
        if let Some(i) = self.spill() {
            return i;
        }
        let shapes = Shapes::read();
        let shape = shapes.shape(self.id());
        let state = self.load(shape);
        let i = spills.insert(Spill {
            idle_at: shapes.idle_at(self.id(), &state),
            states: vec![(shape, state)],
        });
        self.head = 0;
        self.word = i as u64;
        i
    }

    /// When every state of the entry is the same as no state (µs).
    fn idle_at(&self, shapes: &Shapes, spills: &Spills) -> u64 {
        match self.spill() {
            Some(i) => spills[i].idle_at,
            None => {
                let state = self.load(shapes.shape(self.id()));
                shapes.idle_at(self.id(), &state)
            }
        }
    }

    /// Frees the entry's out-of-line states, as it is dropped.
    fn release(&self, spills: &mut Spills) {
        if let Some(i) = self.spill() {
            spills.remove(i);
        }
    }

    /// Clears `shape`'s state; true when the entry holds nothing any more (its
    /// out-of-line states are then freed).
    pub(super) fn remove_state(&mut self, shape: Shape, spills: &mut Spills) -> bool {
        if self.holds_inline(shape) {
            return true;
        }
        let Some(i) = self.spill() else {
            return false;
        };
        spills.edit(i, |spill| spill.states.retain(|(s, _)| *s != shape));
        let empty = spills[i].states.iter().all(|(_, s)| *s == State::default());
        if empty {
            spills.remove(i);
        }
        empty
    }

    /// Bytes the entry's states take out of line.
    pub(super) fn spilled_bytes(&self, spills: &Spills) -> usize {
        self.spill().map_or(0, |i| spills[i].bytes())
    }
}
