//! Records a store keeps beside its limits: a reservation's, from its reserve to its
//! commit. A record is kept in the same atomic step as the batch it comes with (the
//! reservation's charge), so that neither lands without the other: a charge whose
//! record was lost would be an estimate no one can commit, and a record whose charge
//! was lost would give back what was never taken.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use parking_lot::Mutex;

use super::memory::HashKeys;
use super::{MemoryStore, Request, Store};
use crate::{BatchDecision, Error, Timestamp};

/// The most records the memory store keeps open at once.
pub const MAX_OPEN_RECORDS: usize = 1_000_000;

/// A record to keep with a batch: its id (unguessable, chosen by the caller), its
/// bytes, and how long it is kept unless taken.
#[derive(Clone, Copy, Debug)]
pub struct Keep<'a> {
    /// The record's id: unguessable, so that no one takes another's record.
    pub id: &'a str,
    /// The record.
    pub record: &'a [u8],
    /// How long it is kept unless taken.
    pub ttl: Duration,
}

/// A store that keeps records beside its limits.
pub trait Records: Store {
    /// Decides `requests` as [`Store::check`] does and, when the batch is admitted,
    /// keeps `keep.record` for `keep.ttl` in the same atomic step: the batch's charges
    /// and the record land together, or neither does. Answers the decision and, when
    /// the record was kept, the handle that takes it: `keep.id`, or on Redis Cluster
    /// the id with the slot it was kept in.
    fn check_keeping(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
        keep: Keep<'_>,
    ) -> impl Future<Output = Result<(BatchDecision, Option<String>), Error>> + Send;

    /// Takes the record kept under `handle` if it has not expired: of two callers
    /// taking it, one gets it. `Ok(None)`: none is kept (taken already, expired, never
    /// kept, or a handle this store did not give).
    fn take(
        &self,
        handle: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, Error>> + Send;

    /// Keeps `record` under `handle` again for `ttl` (a taken record given back,
    /// when what it was taken for failed).
    fn put(
        &self,
        handle: &str,
        record: &[u8],
        ttl: Duration,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Records kept in this process, each until it is taken or expires, at most
/// [`MAX_OPEN_RECORDS`] at once.
#[derive(Debug, Default)]
pub(crate) struct OpenRecords(Mutex<HashMap<String, (Vec<u8>, Timestamp)>>);

impl OpenRecords {
    /// Refuses a record when [`MAX_OPEN_RECORDS`] unexpired ones are open: called
    /// before the batch it comes with is charged.
    pub(crate) fn has_room(&self, now: Timestamp) -> Result<(), Error> {
        let mut open = self.0.lock();
        if open.len() >= MAX_OPEN_RECORDS {
            open.retain(|_, (_, expires)| *expires > now);
        }
        if open.len() >= MAX_OPEN_RECORDS {
            return Err(Error::Store {
                source: format!("{MAX_OPEN_RECORDS} records open").into(),
                transient: true,
            });
        }
        Ok(())
    }

    pub(crate) fn put(&self, handle: &str, record: &[u8], ttl: Duration, now: Timestamp) {
        self.0.lock().insert(
            handle.to_owned(),
            (record.to_vec(), now.saturating_add(ttl)),
        );
    }

    pub(crate) fn take(&self, handle: &str, now: Timestamp) -> Option<Vec<u8>> {
        let taken = self.0.lock().remove(handle);
        taken
            .filter(|(_, expires)| *expires > now)
            .map(|(record, _)| record)
    }
}

impl<H: HashKeys> Records for MemoryStore<H> {
    async fn check_keeping(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
        keep: Keep<'_>,
    ) -> Result<(BatchDecision, Option<String>), Error> {
        // Nothing can fail between the batch and the record once there is room for it.
        self.records().has_room(now)?;
        let batch = self.decide(requests, now)?;
        if !batch.allowed() {
            return Ok((batch, None));
        }
        self.records().put(keep.id, keep.record, keep.ttl, now);
        Ok((batch, Some(keep.id.to_owned())))
    }

    async fn take(&self, handle: &str, now: Timestamp) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.records().take(handle, now))
    }

    async fn put(
        &self,
        handle: &str,
        record: &[u8],
        ttl: Duration,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.records().put(handle, record, ttl, now);
        Ok(())
    }
}
