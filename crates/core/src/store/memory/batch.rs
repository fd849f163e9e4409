//! A batch's view of the shards it holds locked: each request's state, taken out of
//! its entry before the decision round and put back after it, and the `Slots` access
//! the round works through.

use spin::mutex::SpinMutexGuard as MutexGuard;

use super::table::Table;
use super::{HashKeys, Inner, lock};
use crate::algorithm::State;
use crate::store::Request;
use crate::store::round::{Slots, first_sharing};

/// The shards one batch holds, and the states of its requests while it decides.
pub(super) struct Locked<'a, H> {
    inner: &'a Inner<H>,
    guards: Vec<MutexGuard<'a, Table>>,
    /// Shard index of each guard, ascending.
    order: Vec<usize>,
    hashes: Vec<u64>,
    requests: &'a [Request<'a>],
    now: u64,
    /// `slot[i]`: the first request with request i's key and limit shape, whose entry in
    /// `states` holds the state they share.
    slot: Vec<usize>,
    /// The state of each slot (None: the key has none for that shape).
    states: Vec<Option<State>>,
    /// Whether the slot's state was charged.
    charged: Vec<bool>,
}

impl<'a, H: HashKeys> Locked<'a, H> {
    /// Locks every shard the batch touches and takes each request's state out of it.
    pub(super) fn take(inner: &'a Inner<H>, requests: &'a [Request<'a>], now: u64) -> Self {
        let hashes: Vec<u64> = requests.iter().map(|r| inner.hash(r.key)).collect();
        // Lock every shard the batch touches, in ascending index order: a global order,
        // so batches that share keys cannot deadlock whatever order they list them in.
        let mut order: Vec<usize> = hashes.iter().map(|&h| inner.shard_index(h)).collect();
        order.sort_unstable();
        order.dedup();
        let guards = order.iter().map(|&i| lock(&inner.shards[i])).collect();
        let n = requests.len();
        let mut locked = Locked {
            inner,
            guards,
            order,
            hashes,
            requests,
            now,
            slot: (0..n).map(|i| first_sharing(requests, i)).collect(),
            states: vec![None; n],
            charged: vec![false; n],
        };
        for (i, r) in requests.iter().enumerate() {
            if locked.slot[i] == i {
                let (g, hash) = (locked.table(i), locked.hashes[i]);
                let table = &mut *locked.guards[g];
                if let Some(e) = table.entries.find_mut(hash, |e| r.key.is(&e.key)) {
                    locked.states[i] = e.take(r.limit.shape(), &mut table.spills);
                }
            }
        }
        locked
    }

    /// Puts every state back (creating the entries of keys charged for the first time)
    /// and marks every key of the batch used, denied or not: a key being hammered while
    /// over its limit is hot, and evicting it would reset its limit.
    pub(super) fn put_back(mut self) {
        for i in 0..self.requests.len() {
            let (g, hash, key) = (self.table(i), self.hashes[i], self.requests[i].key);
            let limit = self.requests[i].limit;
            let state = if self.slot[i] == i {
                self.states[i].take()
            } else {
                None
            };
            let idle_at = match &state {
                Some(s) if self.charged[i] => limit.idle_at(s).as_micros(),
                _ => 0,
            };
            let table = &mut *self.guards[g];
            let used = table.tick();
            match table.entries.find_mut(hash, |e| key.is(&e.key)) {
                Some(e) => {
                    e.used = used;
                    if let Some(state) = state {
                        e.put(limit.shape(), state, idle_at, &mut table.spills);
                    }
                }
                None => {
                    if let Some(state) = state.filter(|_| self.charged[i]) {
                        let shape = limit.shape();
                        table.insert(self.inner, key, hash, shape, state, idle_at, self.now);
                    }
                }
            }
        }
    }
}

impl<H> Locked<'_, H> {
    fn table(&self, i: usize) -> usize {
        let shard = self.inner.shard_index(self.hashes[i]);
        self.order
            .binary_search(&shard)
            .expect("every request's shard is locked")
    }
}

impl<H> Slots for Locked<'_, H> {
    fn get(&self, i: usize) -> Option<&State> {
        self.states[self.slot[i]].as_ref()
    }

    fn get_mut(&mut self, i: usize) -> &mut State {
        self.states[self.slot[i]].get_or_insert_default()
    }

    fn charged(&mut self, i: usize) {
        self.charged[self.slot[i]] = true;
    }
}
