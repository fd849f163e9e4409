//! The `Store` trait: where limit state lives. One call decides one batch of
//! (key, limit, cost) requests atomically: every limit admits and all are charged, or
//! none is (except `count_rejected` limits, which are charged either way).
//!
//! Implementations: [`MemoryStore`] here; `spillway-redis` for Redis. Both pass the
//! conformance scenarios in `spillway-testkit`. [`GuardedStore`] wraps any of them with
//! a breaker, a timeout and each limit's failure policy.

mod guarded;
mod memory;
mod round;

use std::future::Future;

pub use guarded::{
    DEFAULT_DENY_CACHE_BYTES, DenyCache, Guard, Guarded, GuardedStore, Source, Unanswered,
};
pub use memory::{MemoryStore, MemoryStoreBuilder};

use crate::{BatchDecision, Decision, Error, Key, Limit, Timestamp, limit::MAX_EXACT};

/// The most requests one batch may hold. A request naming thousands of limits is
/// almost certainly hostile, and is refused before it reaches a store.
pub const MAX_BATCH: usize = 64;

/// One (key, limit, cost) to decide.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// Whose limit.
    pub key: &'a Key,
    /// Which limit.
    pub limit: &'a Limit,
    /// Units to charge: 1 for a request, bytes for a bandwidth limit, 0 to only look.
    pub cost: u64,
}

impl<'a> Request<'a> {
    /// A request of `cost` units against `limit` for `key`.
    pub fn new(key: &'a Key, limit: &'a Limit, cost: u64) -> Self {
        Request { key, limit, cost }
    }
}

/// Where limit state lives.
///
/// `now` is the caller's clock. A store may be configured to use its own clock
/// instead (Redis `TIME`, so that every app server agrees); the memory store uses `now`.
pub trait Store: Send + Sync {
    /// Decides `requests` all or nothing, in one atomic round.
    fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> impl Future<Output = Result<BatchDecision, Error>> + Send;

    /// Decides one request. Stores override this when one request can skip the batch
    /// machinery (the memory store does: no allocation).
    fn check_one(
        &self,
        request: Request<'_>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        async move {
            let batch = self.check(&[request], now).await?;
            Ok(batch.decisions[0])
        }
    }

    /// Whether the store is in this process (no round trip to save: the
    /// [`GuardedStore`]'s deny cache stays off for it).
    fn is_local(&self) -> bool {
        false
    }

    /// Whether one call may hold keys of different key groups (not on Redis Cluster,
    /// where a group is a slot): a sync flush batches keys across groups where it may.
    fn spans_groups(&self) -> bool {
        true
    }

    /// Forgets `key`'s state for `limit` (and every limit of the same shape).
    fn reset(&self, key: &Key, limit: &Limit) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Refuses requests no store should see: too many in a batch, a cost beyond 2^53.
pub fn validate(requests: &[Request<'_>]) -> Result<(), Error> {
    if requests.len() > MAX_BATCH {
        return Err(Error::InvalidRequest(format!(
            "{} limits in one request, the most is {MAX_BATCH}",
            requests.len()
        )));
    }
    requests.iter().try_for_each(|r| validate_cost(r.cost))
}

#[inline]
pub(crate) fn validate_cost(cost: u64) -> Result<(), Error> {
    if cost > MAX_EXACT {
        return Err(Error::InvalidRequest(format!(
            "cost {cost} is larger than 2^53"
        )));
    }
    Ok(())
}

/// A shared store is a store: several [`GuardedStore`]s (simulated servers, say) can
/// decide on one.
impl<S: Store> Store for std::sync::Arc<S> {
    fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> impl Future<Output = Result<BatchDecision, Error>> + Send {
        (**self).check(requests, now)
    }

    fn check_one(
        &self,
        request: Request<'_>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        (**self).check_one(request, now)
    }

    fn is_local(&self) -> bool {
        (**self).is_local()
    }

    fn spans_groups(&self) -> bool {
        (**self).spans_groups()
    }

    fn reset(&self, key: &Key, limit: &Limit) -> impl Future<Output = Result<(), Error>> + Send {
        (**self).reset(key, limit)
    }
}
