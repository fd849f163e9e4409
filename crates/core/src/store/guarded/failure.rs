//! A round on the store, and what answers when it fails: the breaker and the timeout
//! around the call, then each request's failure policy.

use std::time::Duration;

use crate::{
    BatchDecision, Decision, Error, OnStoreError, Outcome, Store, StoreFailure, Timestamp,
};

use super::{Guard, Guarded, GuardedStore, Request, Source, Unanswered};

impl<S: Store> GuardedStore<S> {
    /// One round on the store, unless the breaker is open; bounded by the timeout.
    pub(super) async fn call(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreFailure> {
        self.through(requests, now, self.store.check(requests, now))
            .await
    }

    /// `op`, a call on the store deciding `requests` (none for a call that decides
    /// nothing), unless the breaker is open; bounded by the timeout; its outcome
    /// recorded by the breaker.
    pub(super) async fn through<T>(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
        op: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, StoreFailure> {
        // An in-process store answers at once and fails only on bad input: no breaker
        // to consult, no timer to arm.
        if self.store.is_local() {
            return op.await.map_err(StoreFailure::Failed);
        }
        if !self.breaker.admit(now) {
            return Err(StoreFailure::BreakerOpen);
        }
        let result = match self.timeout {
            None => op.await,
            Some(t) => tokio::time::timeout(t, op)
                .await
                .unwrap_or(Err(Error::Timeout(t))),
        };
        // A heavy batch that timed out says how heavy it is, not that the store is
        // down: it is answered by its policy, but it does not count toward the breaker,
        // so one client's heavy requests cannot open it for everyone (the store sends
        // them in calls of their own, so light batches do not wait in them). Unless it
        // is the breaker's probe: then it decides, as any probe.
        if let Err(Error::Timeout(_)) = &result
            && self.breaker.state() == crate::BreakerState::Closed
            && crate::store::is_heavy(requests)
        {
            return result.map_err(StoreFailure::Failed);
        }
        self.breaker.record(result, now)
    }

    /// What answers `requests` when the store did not: `closed` refuses the round;
    /// else the `local` requests are decided together (all or nothing among them) on
    /// the in-process store, and the `open` ones admitted.
    pub(super) fn fall_back(
        &self,
        requests: &[Request<'_>],
        guards: &[Guard],
        now: Timestamp,
        failure: StoreFailure,
    ) -> Result<Guarded, Unanswered> {
        if guards.iter().any(|g| g.policy() == OnStoreError::Closed) {
            return Err(Unanswered::Unavailable(failure));
        }
        let local: Vec<usize> = (0..requests.len())
            .filter(|&i| guards[i].policy() == OnStoreError::Local)
            .collect();
        let mut sources = vec![Source::Open; requests.len()];
        let mut decisions: Vec<Decision> = requests.iter().map(|r| admit(r)).collect();
        let (mut denied_by, mut lapsed) = (None, Vec::new());
        if !local.is_empty() {
            let subset: Vec<Request<'_>> = local.iter().map(|&i| requests[i]).collect();
            let batch = self
                .local
                .decide(&subset, now)
                .map_err(Unanswered::Invalid)?;
            for (&i, d) in local.iter().zip(batch.decisions) {
                decisions[i] = d;
                sources[i] = Source::Local;
            }
            denied_by = batch.denied_by.map(|j| local[j]);
            lapsed = batch.lapsed.iter().map(|&(j, n)| (local[j], n)).collect();
        }
        Ok(Guarded {
            batch: BatchDecision {
                decisions,
                denied_by,
                lapsed,
                // This server's own count is not the budget's: a threshold it reaches
                // is no one's to report.
                alerts: Vec::new(),
            },
            sources,
            failure: Some(failure),
        })
    }
}

/// What an `open` policy answers: admitted, with the whole limit left.
fn admit(r: &Request<'_>) -> Decision {
    let capacity = r.limit.capacity();
    Decision {
        outcome: Outcome::Allowed,
        limit: capacity,
        remaining: capacity,
        reset_after: Duration::ZERO,
        wait: std::time::Duration::ZERO,
        borrowed: false,
        queued: false,
    }
}
