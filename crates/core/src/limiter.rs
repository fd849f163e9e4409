//! `Limiter`: what users hold. A store plus a clock; every method reads the clock
//! once and makes one store call.

use crate::store::{Request, Store, validate, validate_one};
use crate::{BatchDecision, Clock, Decision, Error, Key, Limit, SystemClock};

/// Decides requests against limits kept in a [`Store`], at the time its [`Clock`] says.
///
/// Cloning a limiter over a [`MemoryStore`](crate::MemoryStore) shares the state.
#[derive(Clone, Debug)]
pub struct Limiter<S, C = SystemClock> {
    store: S,
    clock: C,
}

impl<S: Store> Limiter<S> {
    /// A limiter on the OS wall clock.
    pub fn new(store: S) -> Self {
        Limiter {
            store,
            clock: SystemClock,
        }
    }
}

impl<S: Store, C: Clock> Limiter<S, C> {
    /// A limiter on `clock` ([`ManualClock`](crate::ManualClock) in tests,
    /// [`CoarseClock`](crate::CoarseClock) where a check must cost nanoseconds).
    pub fn with_clock(store: S, clock: C) -> Self {
        Limiter { store, clock }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// One request (cost 1) against `limit` for `key`.
    pub async fn check(&self, key: &Key, limit: &Limit) -> Result<Decision, Error> {
        self.check_n(key, limit, 1).await
    }

    /// A request of `cost` units (bytes, tokens, weighted calls).
    pub async fn check_n(&self, key: &Key, limit: &Limit, cost: u64) -> Result<Decision, Error> {
        self.check_request(Request::new(key, limit, cost)).await
    }

    /// One request bringing `member`, for a `distinct` limit: admitted if `member` was
    /// already counted in the window, or if there is room for one more.
    pub async fn check_member(
        &self,
        key: &Key,
        limit: &Limit,
        member: &[u8],
    ) -> Result<Decision, Error> {
        self.check_request(Request::new(key, limit, 1).with_member(member))
            .await
    }

    async fn check_request(&self, request: Request<'_>) -> Result<Decision, Error> {
        validate_one(&request)?;
        self.store.check_one(request, self.clock.now()).await
    }

    /// Several (key, limit, cost) requests, all or nothing.
    pub async fn check_all(&self, requests: &[Request<'_>]) -> Result<BatchDecision, Error> {
        validate(requests)?;
        self.store.check(requests, self.clock.now()).await
    }

    /// Reports `key`'s state for `limit` without charging anything (cost 0).
    pub async fn peek(&self, key: &Key, limit: &Limit) -> Result<Decision, Error> {
        self.check_n(key, limit, 0).await
    }

    /// Forgets `key`'s state for `limit`.
    pub async fn reset(&self, key: &Key, limit: &Limit) -> Result<(), Error> {
        self.store.reset(key, limit).await
    }
}
