//! `Limiter`: what users hold. A store plus a clock; every method reads the clock
//! once and makes one store call.

mod hold;

pub use hold::{Hold, Renewing, keep_renewed, new_id as new_hold_id, release_detached};

use crate::store::{Request, Store};
use crate::{BatchDecision, Clock, CoarseClock, Decision, Error, Key, Limit, Timestamp};

/// Units reserved by [`Limiter::reserve`]: the estimate, and when it was charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Units charged on the way in.
    pub estimate: u64,
    /// When (the caller's clock): a fixed window gives back only in the window of it.
    pub at: Timestamp,
}

/// What settling a reservation takes: `units` more as usage past the estimate, or,
/// with `refund` (when the estimate was charged), `units` of the estimate given back.
/// Nothing (`units` 0, no refund) when the work used exactly the estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// Units charged as usage, or given back with `refund`.
    pub units: u64,
    /// When the estimate was charged, for a settle that gives units back.
    pub refund: Option<Timestamp>,
}

impl Reservation {
    /// The settle rule, the one every settle follows (the library's, the tower layer's,
    /// the service's `/v1/commit`): the work `used` what it did; the excess over the
    /// estimate is usage, what it did not use is given back.
    pub fn settlement(&self, used: u64) -> Settlement {
        Settlement {
            units: used.abs_diff(self.estimate),
            refund: (used < self.estimate).then_some(self.at),
        }
    }

    /// The request that settles this reservation of `key`'s `limit` once the work
    /// `used` what it did ([`settlement`](Self::settlement); a look when they are equal).
    pub fn settle<'a>(&self, key: &'a Key, limit: &'a Limit, used: u64) -> Request<'a> {
        let Settlement { units, refund } = self.settlement(used);
        match refund {
            None => Request::usage(key, limit, units),
            Some(at) => Request::refund(key, limit, units, at),
        }
    }
}

/// Decides requests against limits kept in a [`Store`], at the time its [`Clock`] says.
///
/// Cloning a limiter over a [`MemoryStore`](crate::MemoryStore) shares the state.
#[derive(Clone, Debug)]
pub struct Limiter<S, C = CoarseClock> {
    store: S,
    clock: C,
}

impl<S: Store> Limiter<S> {
    /// A limiter on the process's [`CoarseClock`]: wall time read with one atomic load,
    /// in steps of about a millisecond. For finer time, [`with_clock`](Limiter::with_clock)
    /// and [`SystemClock`](crate::SystemClock).
    pub fn new(store: S) -> Self {
        Limiter {
            store,
            clock: CoarseClock::new(),
        }
    }
}

impl<S: Store, C: Clock> Limiter<S, C> {
    /// A limiter on `clock` ([`ManualClock`](crate::ManualClock) in tests,
    /// [`SystemClock`](crate::SystemClock) for sub-millisecond time).
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
    pub fn check<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_request(Request::new(key, limit, 1))
    }

    /// A request of `cost` units (bytes, tokens, weighted calls).
    pub fn check_n<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_request(Request::new(key, limit, cost))
    }

    /// One request bringing `member`, for a `distinct` limit: admitted if `member` was
    /// already counted in the window, or if there is room for one more.
    pub fn check_member<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
        member: &'a [u8],
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_request(Request::new(key, limit, 1).with_member(member))
    }

    /// A request of `cost` units to a `shares` limit, from the child and at the
    /// priority `member` names ([`shares::member`](crate::algorithm::shares::member)).
    pub fn check_share<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
        member: &'a [u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_request(Request::new(key, limit, cost).with_member(member))
    }

    /// The store's own future, with the clock read when the check is made (the same
    /// as when it is first polled, for a check awaited at once). No `async fn` layers
    /// of its own: each would copy the decision on its way out, which on the memory
    /// store cost more than the decision itself (56 ns a check against 35 ns). The
    /// store refuses an invalid request (every `Store` validates).
    fn check_request<'a>(
        &'a self,
        request: Request<'a>,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.store.check_one(request, self.clock.now())
    }

    /// One request (cost `cost`) that waits for its turn: [`check_n`](Limiter::check_n),
    /// and when the limit admits it after a wait ([`LimitBuilder::max_wait`](crate::LimitBuilder::max_wait)),
    /// that wait slept through (tokio's timer) before the decision is returned: once it
    /// returns an admission, go ahead. A denial returns at once, as `check_n`'s.
    pub async fn check_waiting(
        &self,
        key: &Key,
        limit: &Limit,
        cost: u64,
    ) -> Result<Decision, Error> {
        let decision = self.check_request(Request::new(key, limit, cost)).await?;
        if decision.allowed() && !decision.wait.is_zero() {
            tokio::time::sleep(decision.wait).await;
        }
        Ok(decision)
    }

    /// Several (key, limit, cost) requests, all or nothing.
    pub fn check_all<'a>(
        &'a self,
        requests: &'a [Request<'a>],
    ) -> impl Future<Output = Result<BatchDecision, Error>> + Send + 'a {
        self.store.check(requests, self.clock.now())
    }

    /// Charges `used` units already spent (the tokens a response used, the bytes it
    /// sent) to `key`'s `limit`, in full even past the limit: the limit goes into debt
    /// and later checks are denied until it is paid back. The decision says whether it
    /// is in debt now. Check before the work with [`peek`](Limiter::peek) (or a cost of
    /// your estimate), then charge what it really cost.
    pub fn charge_usage<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
        used: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_request(Request::usage(key, limit, used))
    }

    /// Reserves `estimate` units of `key`'s `limit` before the work (the tokens a
    /// response may use): admitted only if the estimate fits, and then charged like any
    /// request (a limit that cannot [refund](crate::Algorithm::refunds) is refused).
    /// Settle it with [`commit`](Limiter::commit) once the work says what it
    /// really cost. A reservation never settled keeps its estimate charged.
    pub async fn reserve(
        &self,
        key: &Key,
        limit: &Limit,
        estimate: u64,
    ) -> Result<(Decision, Option<Reservation>), Error> {
        let now = self.clock.now();
        // A limit that could not give the estimate back is refused now, not at commit.
        crate::store::validate_one(&Request::refund(key, limit, estimate, now))?;
        let decision = self
            .store
            .check_one(Request::new(key, limit, estimate), now)
            .await?;
        let reservation = decision
            .allowed()
            .then_some(Reservation { estimate, at: now });
        Ok((decision, reservation))
    }

    /// Settles `reservation` of `key`'s `limit` with what the work really `used`: the
    /// excess charged as usage (into debt past the limit), the estimate not used given
    /// back ([`Limit::refund`]); `used` 0 releases it all. The decision is a look after.
    pub async fn commit(
        &self,
        key: &Key,
        limit: &Limit,
        reservation: Reservation,
        used: u64,
    ) -> Result<Decision, Error> {
        let request = reservation.settle(key, limit, used);
        self.store.check_one(request, self.clock.now()).await
    }

    /// Reports `key`'s state for `limit` without charging anything (cost 0).
    pub fn peek<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_n(key, limit, 0)
    }

    /// Forgets `key`'s state for `limit`.
    pub async fn reset(&self, key: &Key, limit: &Limit) -> Result<(), Error> {
        self.store.reset(key, limit, self.clock.now()).await
    }
}
