//! A batch's view of the shards it holds locked: where each request's key lives, and
//! the `Slots` access the decision round works through.

use parking_lot::MutexGuard;

use super::Inner;
use super::table::{Entry, Table};
use crate::algorithm::State;
use crate::store::Request;
use crate::store::round::Slots;

/// The shards one batch holds, and where each request's key lives in them.
pub(super) struct Locked<'a, H> {
    pub(super) inner: &'a Inner<H>,
    pub(super) guards: Vec<MutexGuard<'a, Table>>,
    /// Shard index of each guard, ascending.
    pub(super) order: Vec<usize>,
    pub(super) hashes: Vec<u64>,
    pub(super) requests: &'a [Request<'a>],
    pub(super) now: u64,
}

impl<H> Locked<'_, H> {
    fn table(&self, i: usize) -> usize {
        let shard = self.inner.shard_index(self.hashes[i]);
        self.order
            .binary_search(&shard)
            .expect("every request's shard is locked")
    }

    fn entry_mut(&mut self, i: usize) -> &mut Entry {
        let (g, hash, key) = (self.table(i), self.hashes[i], self.requests[i].key);
        let shape = self.requests[i].limit.shape();
        let table = &mut *self.guards[g];
        if table
            .entries
            .find(hash, |e| e.hash == hash && e.key == *key)
            .is_none()
        {
            table.insert(self.inner, key, hash, shape, self.now);
        }
        table
            .entries
            .find_mut(hash, |e| e.hash == hash && e.key == *key)
            .expect("just inserted")
    }

    /// Marks every key of the batch used now, denied or not: a key being hammered
    /// while over its limit is hot, and evicting it would reset its limit.
    pub(super) fn touch_all(&mut self) {
        for i in 0..self.requests.len() {
            let (g, hash, key) = (self.table(i), self.hashes[i], self.requests[i].key);
            if let Some(e) = self.guards[g]
                .entries
                .find_mut(hash, |e| e.hash == hash && e.key == *key)
            {
                e.last_used = self.now;
            }
        }
    }
}

impl<H> Slots for Locked<'_, H> {
    fn get(&self, i: usize) -> Option<&State> {
        let (g, hash, key) = (self.table(i), self.hashes[i], self.requests[i].key);
        self.guards[g]
            .entries
            .find(hash, |e| e.hash == hash && e.key == *key)?
            .state(self.requests[i].limit.shape())
    }

    fn get_mut(&mut self, i: usize) -> &mut State {
        let shape = self.requests[i].limit.shape();
        self.entry_mut(i).state_mut(shape)
    }

    fn charged(&mut self, i: usize) {
        let limit = self.requests[i].limit;
        let shape = limit.shape();
        let e = self.entry_mut(i);
        let idle = e.state(shape).map_or(0, |s| limit.idle_at(s).as_micros());
        e.idle_at = e.idle_at.max(idle);
    }
}
