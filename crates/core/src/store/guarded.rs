//! `GuardedStore`: what happens between a decision and a store that may fail. The
//! service and the tower layer both decide through one, so a failing store is handled
//! one way everywhere:
//!
//! - the call goes through a circuit [`Breaker`], and an optional timeout (for stores
//!   without one of their own), so a dead store costs a request at most the timeout;
//! - an invalid request (too many limits, a cost past 2^53) is refused before any store
//!   call, as the caller's error; whatever the store then refuses (a batch across Redis
//!   Cluster slots, say) is the store's failure, though it does not trip the breaker;
//! - on a failure each request's failure policy answers: a [`Mode::Shadow`] limit lets
//!   through (it never changes an answer), `closed` refuses the whole round, `local`
//!   decides on an in-process [`MemoryStore`] holding the same limits, `open` admits;
//! - a unit-cost request that the store denied until T is answered from the
//!   [`DenyCache`] until T, exactly as the store would (see its docs): on by default for
//!   a remote store, off for one in this process (nothing to save).

mod deny_cache;
mod failure;
mod quota;
mod records;
mod report;
mod shares;

use std::time::Duration;

pub use deny_cache::DenyCache;
pub use report::{Report, report};

use crate::{
    BatchDecision, Breaker, Error, Mode, OnStoreError, Sharing, Store, StoreFailure, Timestamp,
};
use quota::Quotas;

use super::{MemoryStore, Request};

/// How one request's answer is used: the mode, failure policy and sharing of its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guard {
    /// Enforce, or only observe.
    pub mode: Mode,
    /// What to do when the store gives no answer.
    pub on_store_error: OnStoreError,
    /// Exact, a lease or sync (checked against the limit by [`Sharing::check`]).
    pub sharing: Sharing,
}

impl Guard {
    /// A guard for an exact limit in `mode` with failure policy `on_store_error`.
    pub fn new(mode: Mode, on_store_error: OnStoreError) -> Guard {
        Guard {
            mode,
            on_store_error,
            sharing: Sharing::Exact,
        }
    }

    /// The same guard, sharing its limit as `sharing` says.
    pub fn sharing(mut self, sharing: Sharing) -> Guard {
        self.sharing = sharing;
        self
    }

    /// The failure policy that applies: a shadow limit never changes an answer, so
    /// without a store it lets through whatever its configured policy.
    pub fn policy(self) -> OnStoreError {
        match self.mode {
            Mode::Shadow => OnStoreError::Open,
            Mode::Enforce => self.on_store_error,
        }
    }
}

/// Who gave a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The store.
    Store,
    /// The in-process fallback store (`on_store_error: local`).
    Local,
    /// No one: the store failed and the limit's policy admits (`open`, or shadow).
    Open,
    /// The deny cache: the store denied it before, and that denial still holds.
    Cache,
    /// This server's share of the limit: a lease, or its count kept by sync.
    Share,
}

/// The deny cache's default size: 16 MiB, about 170,000 cached denials.
pub const DEFAULT_DENY_CACHE_BYTES: usize = 16 << 20;

/// The answer to one round: every request's decision and who gave it.
#[derive(Debug)]
pub struct Guarded {
    /// One decision per request, in request order; `denied_by` as the store's.
    pub batch: BatchDecision,
    /// Who gave each decision, in request order.
    pub sources: Vec<Source>,
    /// Why the store gave none, when it did not (the failure policies answered).
    pub failure: Option<StoreFailure>,
}

/// Why a round has no answer.
#[derive(Debug, thiserror::Error)]
pub enum Unanswered {
    /// The request is invalid (too many limits, a cost past 2^53): the caller's error.
    /// No store was called.
    #[error("{0}")]
    Invalid(Error),
    /// The store failed and a limit's policy is `closed`.
    #[error("{0}")]
    Unavailable(StoreFailure),
}

/// A store behind a circuit breaker and an optional timeout, with an in-process
/// fallback for `local` limits, a deny cache, leases and sync.
///
/// ```
/// use std::time::Duration;
/// use spillway_core::{
///     Algorithm, Breaker, Guard, GuardedStore, Key, Limit, MemoryStore, Mode, OnStoreError,
///     Request, Source, Timestamp,
/// };
///
/// # tokio_test();
/// # fn tokio_test() { let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap(); rt.block_on(async {
/// let store = GuardedStore::new(MemoryStore::new(), Breaker::new(5, Duration::from_millis(500)))
///     .timeout(Duration::from_millis(20));
/// let limit = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(1))?;
/// let key = Key::new("user:42")?;
/// let guard = Guard::new(Mode::Enforce, OnStoreError::Local);
///
/// let answer = store
///     .decide(&[Request::new(&key, &limit, 1)], &[guard], Timestamp::from_secs(1_700_000_000))
///     .await?;
/// assert!(answer.batch.allowed());
/// assert_eq!(answer.sources, [Source::Store]); // the store answered: no failure policy
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap(); }
/// ```
#[derive(Debug)]
pub struct GuardedStore<S> {
    store: S,
    breaker: Breaker,
    timeout: Option<Duration>,
    local: MemoryStore,
    deny: Option<DenyCache>,
    quotas: Option<Quotas>,
}

impl<S: Store> GuardedStore<S> {
    /// Guards `store` with `breaker`. Without a [`timeout`](GuardedStore::timeout),
    /// the store's own bounds the wait (the Redis store has one). The deny cache is on
    /// ([`DEFAULT_DENY_CACHE_BYTES`]) unless the store is in this process; so are
    /// leases and sync (on a store in this process they would save nothing: no-ops).
    pub fn new(store: S, breaker: Breaker) -> GuardedStore<S> {
        let remote = !store.is_local();
        GuardedStore {
            store,
            breaker,
            timeout: None,
            local: MemoryStore::new(),
            deny: DenyCache::with_bytes(if remote { DEFAULT_DENY_CACHE_BYTES } else { 0 }),
            quotas: remote.then(|| Quotas::new(quota::DEFAULT_SHARE_BYTES)),
        }
    }

    /// Acts on leases and sync (`true`) or decides every limit exactly (`false`),
    /// whichever the store: `spillway simulate --servers` shares one in-process store
    /// between simulated servers this way.
    pub fn shares(mut self, on: bool) -> GuardedStore<S> {
        self.quotas = on.then(|| Quotas::new(quota::DEFAULT_SHARE_BYTES));
        self
    }

    /// Bounds the leases and the sync counts at `bytes` each (default 64 MiB; an
    /// entry counted at its largest, a key of 1 KiB): past it, new keys are decided
    /// exactly, by the store.
    pub fn share_bytes(mut self, bytes: usize) -> GuardedStore<S> {
        if self.quotas.is_some() {
            self.quotas = Some(Quotas::new(bytes));
        }
        self
    }

    /// Sizes the deny cache at `bytes`; 0 turns it off.
    pub fn deny_cache(mut self, bytes: usize) -> GuardedStore<S> {
        self.deny = DenyCache::with_bytes(bytes);
        self
    }

    /// Lets the deny cache answer fixed windows that count rejected requests, as the
    /// Envoy reference's local cache does ([`DenyCache::answering_counted_denials`]).
    pub fn deny_cache_counting(mut self, yes: bool) -> GuardedStore<S> {
        self.deny = self.deny.map(|d| d.answering_counted_denials(yes));
        self
    }

    /// Gives up on the store after `timeout` (needs a Tokio runtime with its timer).
    pub fn timeout(mut self, timeout: Duration) -> GuardedStore<S> {
        self.timeout = Some(timeout);
        self
    }

    /// Decides `requests` (all or nothing) on the store, or, when it gives no answer,
    /// by each request's guard (`guards[i]` for `requests[i]`).
    pub async fn decide(
        &self,
        requests: &[Request<'_>],
        guards: &[Guard],
        now: Timestamp,
    ) -> Result<Guarded, Unanswered> {
        debug_assert_eq!(requests.len(), guards.len());
        if requests.is_empty() {
            return Ok(Guarded {
                batch: BatchDecision {
                    decisions: Vec::new(),
                    denied_by: None,
                    lapsed: Vec::new(),
                    alerts: Vec::new(),
                },
                sources: Vec::new(),
                failure: None,
            });
        }
        super::validate(requests).map_err(Unanswered::Invalid)?;
        // A share first: units this server holds were counted by the store, whatever a
        // cached denial (of the store's remaining units) says.
        // Usage goes to the store as it is: charged in full, never from a share.
        let quotas = self.quotas.as_ref().filter(|_| {
            guards.iter().any(|g| g.sharing.is_shared()) && !requests.iter().any(|r| r.usage)
        });
        if let Some(batch) = quotas.and_then(|q| q.answer(requests, guards, now.as_micros())) {
            return Ok(Guarded {
                sources: vec![Source::Share; batch.decisions.len()],
                batch,
                failure: None,
            });
        }
        if let Some(answer) = self.cached(requests, now) {
            return Ok(answer);
        }
        let result = match quotas {
            Some(quotas) => {
                let asks = quotas.asks(requests, guards, now.as_micros());
                self.ask(quotas, requests, guards, &asks, now).await
            }
            None => self.call(requests, now).await,
        };
        match result {
            Ok(batch) => Ok(self.answered(requests, batch, now)),
            Err(failure) => self.fall_back(requests, guards, now, failure),
        }
    }

    /// The store's answer to `requests`, learnt by the deny cache.
    pub(super) fn answered(
        &self,
        requests: &[Request<'_>],
        batch: BatchDecision,
        now: Timestamp,
    ) -> Guarded {
        // With a lease's larger ask denied, the cost alone was denied too (else it was
        // asked again): a fixed window's denial holds to its end either way.
        if let Some(cache) = &self.deny {
            cache.learn(requests, &batch, now.as_micros());
        }
        Guarded {
            sources: vec![Source::Store; batch.decisions.len()],
            batch,
            failure: None,
        }
    }

    /// The answer when every request has a cached denial (a batch with one request
    /// the store would admit must go to the store: its decision is not known here).
    pub(super) fn cached(&self, requests: &[Request<'_>], now: Timestamp) -> Option<Guarded> {
        let decisions = self.deny.as_ref()?.answer(requests, now.as_micros())?;
        Some(Guarded {
            sources: vec![Source::Cache; decisions.len()],
            batch: BatchDecision {
                decisions,
                denied_by: Some(0),
                lapsed: Vec::new(),
                alerts: Vec::new(),
            },
            failure: None,
        })
    }

    /// Forgets cached denials, leases and sync counts of `key` under `limit`: call it
    /// after resetting them.
    pub fn forget(&self, key: &crate::Key, limit: &crate::Limit) {
        self.forget_denial(key, limit);
        if let Some(quotas) = &self.quotas {
            quotas.forget(key, limit);
        }
    }

    fn forget_denial(&self, key: &crate::Key, limit: &crate::Limit) {
        if let Some(cache) = &self.deny {
            cache.forget(key, limit);
        }
    }

    /// Forgets every cached denial, lease and sync count: call it when limits change
    /// (a policy reload).
    pub fn forget_all(&self) {
        if let Some(cache) = &self.deny {
            cache.clear();
        }
        if let Some(quotas) = &self.quotas {
            quotas.clear();
        }
    }
}

impl<S> GuardedStore<S> {
    /// The guarded store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The breaker in front of it.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// The in-process store that `local` limits fall back to.
    pub fn local(&self) -> &MemoryStore {
        &self.local
    }

    /// The deny cache, when it is on.
    pub fn deny_cache_ref(&self) -> Option<&DenyCache> {
        self.deny.as_ref()
    }
}

/// A guarded store is a store: every request enforced and `closed` (a failure is an
/// `Err`), so the conformance tables and the differential test run through it, deny cache
/// and all. A reset forgets the key's cached denials too.
impl<S: Store> Store for GuardedStore<S> {
    async fn check(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, Error> {
        let guards = vec![Guard::new(Mode::Enforce, OnStoreError::Closed); requests.len()];
        match self.decide(requests, &guards, now).await {
            Ok(answer) => Ok(answer.batch),
            Err(Unanswered::Invalid(e) | Unanswered::Unavailable(StoreFailure::Failed(e))) => {
                Err(e)
            }
            Err(Unanswered::Unavailable(StoreFailure::BreakerOpen)) => Err(Error::Store {
                source: "store unavailable (circuit breaker open)".into(),
                transient: true,
            }),
        }
    }

    fn is_local(&self) -> bool {
        self.store.is_local()
    }

    fn spans_groups(&self) -> bool {
        self.store.spans_groups()
    }

    async fn reset(
        &self,
        key: &crate::Key,
        limit: &crate::Limit,
        now: Timestamp,
    ) -> Result<(), Error> {
        self.forget(key, limit);
        self.store.reset(key, limit, now).await?;
        // Again: a denial of the old state may have been cached while the reset ran.
        self.forget(key, limit);
        Ok(())
    }
}
