//! Upkeep of the entries: the sync counts' flushes (which are due at a tick, and what
//! the store said), dropping ended entries, forgetting keys.

use crate::decision::Decision;
use crate::key::Key;
use crate::limit::Limit;

use super::{Entry, Quotas, TICK};

/// A sync flush: `pending` hits of `key` to add to the store.
pub(in crate::store::guarded) struct Flush {
    pub key: Key,
    pub limit: Limit,
    pub pending: u64,
}

impl Quotas {
    /// The sync entries due a flush at `now` (their pending hits move to `flushing`),
    /// after dropping every sync entry whose window has ended (and, once a second,
    /// every such lease).
    pub fn due(&self, now: u64) -> Vec<Flush> {
        let mut due = Vec::new();
        let last = self.pruned.load(std::sync::atomic::Ordering::Relaxed);
        if now >= last + 1_000_000 {
            self.pruned.store(now, std::sync::atomic::Ordering::Relaxed);
            for shard in self.leases.iter() {
                shard.lock().retain(|_, e| now < e.until());
            }
        }
        for shard in self.syncs.iter() {
            let mut shard = shard.lock();
            shard.retain(|_, e| now < e.until());
            for entry in shard.values_mut() {
                if let Entry::Sync {
                    pending,
                    flushing,
                    heard,
                    every,
                    flush,
                    key,
                    active,
                    ..
                } = entry
                    && now + TICK >= heard.saturating_add(*every)
                    && *flushing == 0
                    && std::mem::take(active)
                {
                    due.push(Flush {
                        key: key.clone(),
                        limit: flush.clone(),
                        pending: *pending,
                    });
                    *flushing = std::mem::take(pending);
                }
            }
        }
        due
    }

    /// A flush's outcome: the store's count after it (`None`: it failed, the hits are
    /// pending again).
    pub fn flushed(&self, flush: &Flush, decision: Option<&Decision>, now: u64) {
        let mut shard = self.shard(&flush.key, true).lock();
        let Some(Entry::Sync {
            known,
            pending,
            flushing,
            until,
            heard,
            ..
        }) = shard.get_mut(&(flush.key.clone(), flush.limit.shape()))
        else {
            return;
        };
        let hits = std::mem::take(flushing);
        match decision {
            Some(d) => {
                *known = flush.limit.limit().saturating_sub(d.remaining);
                *until = (*until).min(now.saturating_add(d.reset_after.as_micros() as u64));
                *heard = now;
            }
            None => *pending += hits,
        }
    }

    /// Forgets `key`'s share under `limit` (after a reset).
    pub fn forget(&self, key: &Key, limit: &Limit) {
        for sync in [false, true] {
            self.shard(key, sync)
                .lock()
                .remove(&(key.clone(), limit.shape()));
        }
    }

    /// Forgets every share (after a policy reload).
    pub fn clear(&self) {
        for shard in self.leases.iter().chain(self.syncs.iter()) {
            shard.lock().clear();
        }
    }
}
