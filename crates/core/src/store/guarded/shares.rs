//! The store rounds of shared limits: a lease's ask, and the sync counts' flush.

use crate::{BatchDecision, Store, StoreFailure, Timestamp};

use super::quota::Quotas;
use super::{Guard, GuardedStore, Request};

impl<S: Store> GuardedStore<S> {
    /// One round for requests with shares: leases ask for `asks` (more than their
    /// cost); if that is denied where the costs alone might not be, the costs are asked
    /// exactly, so the store's last units are not left unspent.
    pub(super) async fn ask(
        &self,
        quotas: &Quotas,
        requests: &[Request<'_>],
        guards: &[Guard],
        asks: &[u64],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreFailure> {
        let asked: Vec<Request<'_>> = requests
            .iter()
            .zip(asks)
            .map(|(r, &cost)| Request { cost, ..*r })
            .collect();
        let mut batch = self.call(&asked, now).await?;
        let mut asked = &asked[..];
        let cost_alone_fits = requests
            .iter()
            .zip(&batch.decisions)
            .zip(asks)
            .any(|((r, d), &ask)| ask > r.cost && !d.allowed() && d.remaining >= r.cost);
        if !batch.allowed() && cost_alone_fits {
            batch = self.call(requests, now).await?;
            asked = requests;
        }
        let asks: Vec<u64> = asked.iter().map(|r| r.cost).collect();
        quotas.learn(requests, guards, &asks, &mut batch, now.as_micros());
        Ok(batch)
    }

    /// Adds every sync count that is due to the store (calls of at most
    /// [`MAX_BATCH`](crate::store::MAX_BATCH) keys, one key group each on Redis Cluster) and
    /// learns the counts back. Call it every [`MIN_SYNC`](crate::sharing::MIN_SYNC)
    /// ([`every_tick`](crate::sharing::every_tick) does): each key is flushed at the last
    /// tick before its `sync` interval is up. Returns the number of store calls made.
    pub async fn flush(&self, now: Timestamp) -> usize {
        let Some(quotas) = &self.quotas else {
            return 0;
        };
        let mut due = quotas.due(now.as_micros());
        let spans = self.store.spans_groups();
        if !spans {
            due.sort_by(|a, b| a.key.group().cmp(b.key.group()));
        }
        let calls = due
            .chunk_by(|a, b| spans || a.key.group() == b.key.group())
            .flat_map(|group| group.chunks(crate::store::MAX_BATCH))
            .map(|chunk| async move {
                let requests: Vec<Request<'_>> = chunk
                    .iter()
                    .map(|f| Request::new(&f.key, &f.limit, f.pending))
                    .collect();
                let batch = self.call(&requests, now).await.ok();
                for (i, f) in chunk.iter().enumerate() {
                    let decision = batch.as_ref().map(|b| &b.decisions[i]);
                    quotas.flushed(f, decision, now.as_micros());
                    if batch.is_some() && f.pending > 0 {
                        self.forget_denial(&f.key, &f.limit);
                    }
                }
            });
        // All at once: over a multiplexed connection they are pipelined.
        futures_util::future::join_all(calls).await.len()
    }
}
