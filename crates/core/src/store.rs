//! The `Store` trait: where limit state lives. One call decides one batch of
//! (key, limit, cost) requests atomically: every limit admits and all are charged, or
//! none is (except `count_rejected` limits, which are charged either way, and usage
//! requests, which are charged in full whatever the batch decides).
//!
//! Implementations: [`MemoryStore`] here; `spillway-redis` for Redis. Both pass the
//! conformance scenarios in `spillway-testkit`. [`GuardedStore`] wraps any of them with
//! a breaker, a timeout and each limit's failure policy.

mod guarded;
mod memory;
mod records;
mod round;

use std::future::Future;

pub use guarded::{
    DEFAULT_DENY_CACHE_BYTES, DenyCache, Guard, Guarded, GuardedStore, Report, Source, Unanswered,
    report,
};
pub use memory::{
    DEFAULT_MAX_BYTES as DEFAULT_MEMORY_STORE_BYTES, HashKeys, KeyHash, MemoryStore,
    MemoryStoreBuilder, Rehash,
};
pub use records::{Keep, MAX_OPEN_RECORDS, Records};

use crate::{BatchDecision, Decision, Error, Key, Limit, Timestamp, limit::MAX_EXACT};

/// The most requests one batch may hold. A request naming thousands of limits is
/// almost certainly hostile, and is refused before it reaches a store.
pub const MAX_BATCH: usize = 64;

/// Above this much [`work`], a batch is heavy: 64 requests of the lightest algorithms
/// are not; one `sliding_window` of precision 10,000 is.
pub const HEAVY_WORK: u64 = 64;

/// An estimate of what deciding `requests` costs a remote store, in decisions of a
/// fixed window: what each algorithm's state makes it read and write (a log's entries,
/// a sliding window's sub-windows, exact members, a sketch's HyperLogLogs and filters).
pub fn work(requests: &[Request<'_>]) -> u64 {
    use crate::Algorithm;
    requests
        .iter()
        .map(|r| match r.limit.algorithm() {
            Algorithm::SlidingLog => 1 + r.limit.limit() / 64,
            Algorithm::SlidingWindow { precision, .. } => 1 + u64::from(precision) / 64,
            Algorithm::Distinct { .. } if crate::algorithm::distinct::is_exact(r.limit.limit()) => {
                1 + r.limit.limit() / 16
            }
            Algorithm::Distinct { precision } => 4 * u64::from(precision),
            Algorithm::Concurrency => 1 + r.limit.limit() / 16,
            Algorithm::Shares => 2,
            _ => 1,
        })
        .sum()
}

/// Whether `requests` are a heavy batch ([`work`] above [`HEAVY_WORK`]): a remote store
/// sends it in a call of its own, and its timeouts do not count toward the breaker.
pub fn is_heavy(requests: &[Request<'_>]) -> bool {
    work(requests) > HEAVY_WORK
}

/// The decision of `requests`, every one a fixed window that charges rejected requests
/// too ([`Rejected::Charged`](crate::Rejected::Charged): the Envoy reference's rules),
/// given each request's count in its current window before the batch (`before[i]`; of
/// requests sharing a state, same key and limit shape, only the first one's is read).
/// Such a batch is charged in full
/// whatever it decides, so a store may charge first (Redis `INCRBY`, no script) and
/// decide from what the counts were; the answer is the one [`MemoryStore`] gives.
///
/// # Panics
/// If `before` is not one count per request.
pub fn decide_counted(requests: &[Request<'_>], before: &[u64], now: Timestamp) -> BatchDecision {
    assert_eq!(requests.len(), before.len(), "one count per request");
    round::decide_counted(requests, before, now)
}

/// Whether `limit` is one whose requests are all charged by a fixed window's count
/// alone, decided or not: a fixed window charging rejected requests too
/// ([`decide_counted`]).
pub fn is_counted(limit: &Limit) -> bool {
    limit.algorithm() == crate::Algorithm::FixedWindow
        && limit.rejected() == crate::Rejected::Charged
}

/// One (key, limit, cost) to decide, with the member it brings for a `distinct` limit.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// Whose limit.
    pub key: &'a Key,
    /// Which limit.
    pub limit: &'a Limit,
    /// Units to charge: 1 for a request, bytes for a bandwidth limit, 0 to only look.
    pub cost: u64,
    /// What a `distinct` limit counts (an IP, an account): required there, at most
    /// [`MAX_MEMBER`](crate::algorithm::distinct::MAX_MEMBER) bytes; ignored by the
    /// other algorithms.
    pub member: Option<&'a [u8]>,
    /// Usage already spent, reported after the fact (tokens a response used, bytes it
    /// sent): charged in full whatever the limit holds, into debt if it passes the
    /// limit, and never denying the batch. Its decision says whether the limit is in
    /// debt now (`Denied`, with when it is paid back) or not. See
    /// [`Limit::charge_usage`].
    pub usage: bool,
    /// With `usage`: the units are given back, not charged: what a reservation made at
    /// this time took and did not use (see [`Limit::refund`]). Only the algorithms that
    /// [refund](crate::Algorithm::refunds) take it.
    pub refund: Option<Timestamp>,
}

impl<'a> Request<'a> {
    /// A request of `cost` units against `limit` for `key`.
    pub fn new(key: &'a Key, limit: &'a Limit, cost: u64) -> Self {
        Request {
            key,
            limit,
            cost,
            member: None,
            usage: false,
            refund: None,
        }
    }

    /// `cost` units of usage already spent against `limit` for `key`: charged in full,
    /// even past the limit (see [`Request::usage`](Request#structfield.usage)).
    pub fn usage(key: &'a Key, limit: &'a Limit, cost: u64) -> Self {
        Request {
            usage: true,
            ..Request::new(key, limit, cost)
        }
    }

    /// `cost` units given back to `limit` for `key`, charged at `at` by a reservation
    /// that did not use them (see [`Request::refund`](Request#structfield.refund)).
    pub fn refund(key: &'a Key, limit: &'a Limit, cost: u64, at: Timestamp) -> Self {
        Request {
            refund: Some(at),
            ..Request::usage(key, limit, cost)
        }
    }

    /// `key`'s `concurrency` hold named `id` given back (a release): its slots are
    /// free at once. Releasing a hold no longer held changes nothing.
    pub fn release(key: &'a Key, limit: &'a Limit, id: &'a [u8]) -> Self {
        Request::refund(key, limit, 1, Timestamp::from_micros(0)).with_member(id)
    }

    /// `key`'s `concurrency` hold named `id`, of `holds` slots, renewed: its lease
    /// starts again from now; one that has lapsed is taken again if it fits. A take
    /// never renews (a take of a held id is one more hold): this does.
    pub fn renew(key: &'a Key, limit: &'a Limit, id: &'a [u8], holds: u64) -> Self {
        Request::usage(key, limit, holds).with_member(id)
    }

    /// The same request, bringing `member`.
    pub fn with_member(self, member: &'a [u8]) -> Self {
        Request {
            member: Some(member),
            ..self
        }
    }

    /// The member, empty when none came.
    #[inline]
    pub fn member_bytes(&self) -> &'a [u8] {
        self.member.unwrap_or_default()
    }
}

/// Where limit state lives.
///
/// Every implementation refuses what [`validate`] refuses, before any work (callers
/// such as [`Limiter`](crate::Limiter) rely on it). `now` is the caller's clock. A
/// store may be configured to use its own clock instead (Redis `TIME`, so that every
/// app server agrees); the memory store uses `now`.
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

    /// Decides one request here and now, without a future, where the store can (the
    /// memory store can: nothing to wait for); `None` where it must wait (Redis). A
    /// caller that gets `None` calls [`check_one`](Store::check_one) instead. Lets a
    /// middleware answer without boxing a future.
    fn check_one_now(
        &self,
        request: Request<'_>,
        now: Timestamp,
    ) -> Option<Result<Decision, Error>> {
        let _ = (request, now);
        None
    }

    /// [`check_one_now`](Store::check_one_now) of a request whose key is
    /// `Key::joined(parts)`: a store that can find a key by its parts makes it only when
    /// the key is new (the memory store: a known key costs no allocation). `None` where
    /// the store must wait.
    fn check_joined_now(
        &self,
        parts: &[&str],
        limit: &Limit,
        cost: u64,
        now: Timestamp,
    ) -> Option<Result<Decision, Error>> {
        let key = match Key::joined(parts) {
            Ok(key) => key,
            Err(e) => return Some(Err(e)),
        };
        self.check_one_now(Request::new(&key, limit, cost), now)
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

    /// Forgets `key`'s state for `limit` (and every limit of the same shape) at `now`:
    /// a fixed window's count in the window holding `now` (a store may keep a key per
    /// window), every other algorithm's whole state.
    fn reset(
        &self,
        key: &Key,
        limit: &Limit,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Refuses requests no store should see: too many in a batch, a cost beyond 2^53, a
/// `distinct` or `concurrency` request without a member (a hold's id), with one over 1
/// KiB, a `distinct` one with a cost above 1.
pub fn validate(requests: &[Request<'_>]) -> Result<(), Error> {
    if requests.len() > MAX_BATCH {
        return Err(Error::InvalidRequest(format!(
            "{} limits in one request, the most is {MAX_BATCH}",
            requests.len()
        )));
    }
    requests.iter().try_for_each(validate_one)
}

/// [`validate`] for one request.
#[inline]
pub(crate) fn validate_one(r: &Request<'_>) -> Result<(), Error> {
    validate_cost(r.cost)?;
    // A concurrency limit's usage naming a hold is a renewal, its refund a release:
    // neither is units.
    if r.usage && !(r.limit.algorithm().holds() && r.member.is_some()) {
        validate_usage(r.limit, r.cost)?;
    }
    if r.refund.is_some() {
        validate_refund(r)?;
    }
    let algorithm = r.limit.algorithm();
    if !algorithm.takes_member() {
        return Ok(());
    }
    let max = crate::algorithm::distinct::MAX_MEMBER;
    match r.member {
        None if algorithm.holds() => Err(Error::InvalidRequest(format!(
            "a concurrency limit ({}) needs the id of the hold to take or give back",
            r.limit
        ))),
        None if algorithm.shares() => Err(Error::InvalidRequest(format!(
            "a shares limit ({}) needs a member: the request's priority and child \
             (spillway_core::algorithm::shares::member)",
            r.limit
        ))),
        None => Err(Error::InvalidRequest(format!(
            "a distinct limit ({}) needs a member: what to count distinct values of",
            r.limit
        ))),
        Some(m) if algorithm.shares() && (m.len() < 2 || !m[0].is_ascii_digit()) => {
            Err(Error::InvalidRequest(format!(
                "the member of a shares request is its priority (one digit) and its child's \
                 name, not {:?}",
                String::from_utf8_lossy(m)
            )))
        }
        Some(m) if m.is_empty() && algorithm.holds() => Err(Error::InvalidRequest(
            "the id of a concurrency hold is empty".into(),
        )),
        Some(m) if m.len() > max => Err(Error::InvalidRequest(format!(
            "member of {} bytes is longer than {max}",
            m.len()
        ))),
        Some(_) if r.cost > 1 && algorithm.counts_members() => Err(Error::InvalidRequest(format!(
            "cost {} on a distinct limit: a request counts its member once (1) or only \
             asks (0)",
            r.cost
        ))),
        Some(_) => Ok(()),
    }
}

/// Refuses usage a limit cannot take: any on a `distinct` limit (it counts members,
/// not units), a `concurrency` one (holds, taken and given back) or a `shares` one
/// (guaranteed or borrowed is decided before a request goes), and more than
/// [`Limit::max_usage`] in one charge.
pub(crate) fn validate_usage(limit: &Limit, cost: u64) -> Result<(), Error> {
    if limit.algorithm().counts_members() {
        return Err(Error::InvalidRequest(format!(
            "usage charged to a distinct limit ({limit}): it counts members, not units"
        )));
    }
    if limit.algorithm().holds() {
        return Err(Error::InvalidRequest(format!(
            "usage charged to a concurrency limit ({limit}): it counts holds, taken and \
             given back"
        )));
    }
    if limit.algorithm().shares() {
        return Err(Error::InvalidRequest(format!(
            "usage charged to a shares limit ({limit}): its children borrow before they \
             go, so a charge after the fact has no path to take"
        )));
    }
    let most = limit.max_usage();
    if cost > most {
        return Err(Error::InvalidRequest(format!(
            "usage {cost} is more than {limit} can be charged at once ({most})"
        )));
    }
    Ok(())
}

/// Refuses a refund a limit cannot take (see [`Algorithm::refunds`](crate::Algorithm::refunds)),
/// or one that is not usage.
fn validate_refund(r: &Request<'_>) -> Result<(), Error> {
    if !r.usage {
        return Err(Error::InvalidRequest(
            "a refund is usage given back: build it with Request::refund".into(),
        ));
    }
    // A `concurrency` limit's refund is a release: the hold its member names.
    let algorithm = r.limit.algorithm();
    if !algorithm.refunds() && !algorithm.holds() {
        return Err(Error::InvalidRequest(format!(
            "{} cannot give units back (a reservation's unused estimate): only a \
             fixed_window, token_bucket or gcra limit can (and a concurrency limit its \
             holds, by their ids)",
            r.limit
        )));
    }
    Ok(())
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

    fn reset(
        &self,
        key: &Key,
        limit: &Limit,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        (**self).reset(key, limit, now)
    }
}
