//! Records kept beside the limits ([`Records`]: a reservation's), through the guard:
//! a record rides its batch's call past the breaker and the timeout, and is kept only
//! when the store itself decided and admitted the batch.

use std::time::Duration;

use crate::store::{Keep, Records, Request};
use crate::{Error, StoreFailure, Timestamp};

use super::{Guard, Guarded, GuardedStore, Unanswered};

impl<S: Records> GuardedStore<S> {
    /// [`decide`](GuardedStore::decide) of a batch that comes with a record to keep
    /// ([`Records::check_keeping`]): the record is kept only when the store decided the
    /// batch and admitted it, in the same step. A cached denial or a failure policy's
    /// answer keeps none, and no share answers it (the charge goes to the store).
    /// Answers the handle the record was kept under, if it was.
    pub async fn decide_keeping(
        &self,
        requests: &[Request<'_>],
        guards: &[Guard],
        now: Timestamp,
        keep: Keep<'_>,
    ) -> Result<(Guarded, Option<String>), Unanswered> {
        debug_assert_eq!(requests.len(), guards.len());
        if requests.is_empty() {
            return Err(Unanswered::Invalid(Error::InvalidRequest(
                "a record is kept with a batch, and this one is empty".into(),
            )));
        }
        crate::store::validate(requests).map_err(Unanswered::Invalid)?;
        if let Some(answer) = self.cached(requests, now) {
            return Ok((answer, None));
        }
        let kept = self.store.check_keeping(requests, now, keep);
        match self.through(requests, now, kept).await {
            Ok((batch, handle)) => Ok((self.answered(requests, batch, now), handle)),
            Err(failure) => Ok((self.fall_back(requests, guards, now, failure)?, None)),
        }
    }

    /// Takes the record kept under `handle` ([`Records::take`]), unless the breaker is
    /// open; bounded by the timeout.
    pub async fn take(
        &self,
        handle: &str,
        now: Timestamp,
    ) -> Result<Option<Vec<u8>>, StoreFailure> {
        self.through(&[], now, self.store.take(handle, now)).await
    }

    /// Keeps a taken record again ([`Records::put`]), unless the breaker is open.
    pub async fn put(
        &self,
        handle: &str,
        record: &[u8],
        ttl: Duration,
        now: Timestamp,
    ) -> Result<(), StoreFailure> {
        self.through(&[], now, self.store.put(handle, record, ttl, now))
            .await
    }
}
