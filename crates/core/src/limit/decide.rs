//! Deciding with a limit: check, commit, charge a refusal, or all at once.

use crate::algorithm::State;
use crate::decision::Decision;
use crate::time::Timestamp;

use super::Limit;

// === impl Limit: deciding ===

impl Limit {
    /// Would `cost` be admitted at `now`? The decision reports the state as it will be
    /// after [`commit`](Limit::commit) if admitted, or as it is if denied. A
    /// `distinct` limit decides for the empty member: see [`check_member`](Limit::check_member).
    #[inline]
    pub fn check(&self, state: &State, now: Timestamp, cost: u64) -> Decision {
        self.check_member(state, now, cost, &[])
    }

    /// [`check`](Limit::check) for a request that brings `member` (read by `distinct`
    /// limits only).
    #[inline]
    pub fn check_member(
        &self,
        state: &State,
        now: Timestamp,
        cost: u64,
        member: &[u8],
    ) -> Decision {
        self.params.check(state, now.as_micros(), cost, member)
    }

    /// Charges an admitted `cost` at `now`.
    #[inline]
    pub fn commit(&self, state: &mut State, now: Timestamp, cost: u64) {
        self.commit_member(state, now, cost, &[]);
    }

    /// [`commit`](Limit::commit) for a request that brings `member`.
    #[inline]
    pub fn commit_member(&self, state: &mut State, now: Timestamp, cost: u64, member: &[u8]) {
        self.params
            .charge(state, now.as_micros(), cost, true, member);
    }

    /// Whether a denied take of `id` (of `cost`) leaves a mark on `state`: a
    /// `concurrency` limit on which `id` is held.
    #[inline]
    fn marks_denied(&self, state: &State, now: Timestamp, cost: u64, id: &[u8]) -> bool {
        cost > 0 && self.params.marks_denied(state, now.as_micros(), id)
    }

    /// Charges a denied take of `id` to a `concurrency` limit on which `id` is held: a
    /// mark that the take's release gives back (see the `concurrency` algorithm), no
    /// slot. Whether it did.
    #[inline]
    pub(crate) fn mark_denied(
        &self,
        state: &mut State,
        now: Timestamp,
        cost: u64,
        id: &[u8],
    ) -> bool {
        if !self.marks_denied(state, now, cost, id) {
            return false;
        }
        self.params.charge(state, now.as_micros(), cost, false, id);
        true
    }

    /// Charges a denied `cost` at `now`, for `count_rejected` limits (see the module
    /// docs), and returns the decision as it stands after the charge (the ban it
    /// extended shows in `retry_after`) with what remained when the request came, as
    /// every denial's `remaining` says: how far the request was from fitting.
    #[inline]
    pub fn charge_rejected(&self, state: &mut State, now: Timestamp, cost: u64) -> Decision {
        let left = self.check(state, now, cost).remaining;
        self.params.charge(state, now.as_micros(), cost, false, &[]);
        Decision {
            remaining: left,
            ..self.check(state, now, cost)
        }
    }

    /// A request on its own (`member` for a `distinct` limit): [`check`](Limit::check),
    /// then [`commit`](Limit::commit) if admitted or
    /// [`charge_rejected`](Limit::charge_rejected) if denied and the limit counts
    /// rejected requests, in one dispatch. Returns the decision and, when the state was
    /// charged, when it becomes the same as no state.
    #[inline]
    pub fn decide(
        &self,
        state: &mut State,
        now: Timestamp,
        cost: u64,
        member: &[u8],
    ) -> (Decision, Option<Timestamp>) {
        let (d, idle) = self.params.decide(
            state,
            now.as_micros(),
            cost,
            member,
            self.charges_rejected(true),
        );
        (d, idle.map(Timestamp::from_micros))
    }

    /// Charges `cost` units of usage already spent at `now`: in full, even past the
    /// limit, so the state goes into debt, and requests are denied until the window or
    /// the refill has paid it back (a fixed window's debt ends with its window). Returns
    /// the decision of a look (cost 0) after the charge: `Allowed` while the limit is
    /// not in debt, `Denied` with when it will not be. The caller has checked the cost
    /// against [`max_usage`](Limit::max_usage); a `distinct` limit takes no usage.
    #[inline]
    pub fn charge_usage(&self, state: &mut State, now: Timestamp, cost: u64) -> Decision {
        self.decide_usage(state, now, cost).0
    }

    /// [`charge_usage`](Limit::charge_usage), and when the state becomes the same as
    /// no state (`None` when nothing was charged: a usage of 0 only looks).
    #[inline]
    pub fn decide_usage(
        &self,
        state: &mut State,
        now: Timestamp,
        cost: u64,
    ) -> (Decision, Option<Timestamp>) {
        let at = now.as_micros();
        if cost > 0 {
            self.params.charge(state, at, cost, true, &[]);
        }
        let decision = self.params.check(state, at, 0, &[]);
        let idle = (cost > 0).then(|| Timestamp::from_micros(self.params.idle_at(state)));
        (decision, idle)
    }

    /// Gives back at `now` `cost` units charged at `at` and not used (a reservation's
    /// estimate past what it really cost), as far as the state still holds them (see
    /// [`Algorithm::refunds`](crate::Algorithm::refunds)): a token bucket never above
    /// full, a GCRA never idler than now, a fixed window only in the window of `at`.
    /// Returns the decision of a look after it, and when the state becomes the same as
    /// no state. The caller has checked the limit refunds and `cost` against
    /// [`max_usage`](Limit::max_usage).
    pub fn refund(
        &self,
        state: &mut State,
        now: Timestamp,
        cost: u64,
        at: Timestamp,
    ) -> (Decision, Timestamp) {
        self.give_back(state, now, cost, at, &[])
    }

    /// Gives back at `now` the `concurrency` hold named `id`: its slots are free at
    /// once (nothing changes when it is not held). Returns the decision of a look
    /// after it, and when the state becomes the same as no state.
    pub fn release(&self, state: &mut State, now: Timestamp, id: &[u8]) -> (Decision, Timestamp) {
        self.give_back(state, now, 1, Timestamp::from_micros(0), id)
    }

    /// A usage request at `now`: [`decide_usage`](Limit::decide_usage), or on a
    /// `concurrency` limit (whose usage is a renewal) [`renew`](Limit::renew) of the
    /// hold `member` names (of 0 slots: a look, as usage of 0 is).
    pub(crate) fn decide_usage_of(
        &self,
        state: &mut State,
        now: Timestamp,
        cost: u64,
        member: &[u8],
    ) -> (Decision, Option<Timestamp>) {
        if self.algorithm().holds() && cost > 0 {
            let (decision, idle) = self.renew(state, now, cost, member);
            return (decision, Some(idle));
        }
        self.decide_usage(state, now, cost)
    }

    /// Renews at `now` the `concurrency` hold named `id`, of `holds` slots: its lease
    /// starts again; one that has lapsed is taken again if it fits. Returns the
    /// decision (denied only when it had lapsed and does not fit) and when the state
    /// becomes the same as no state. Only for a `concurrency` limit (its caller,
    /// [`decide_usage_of`](Limit::decide_usage_of), checks): crate-private, so no caller
    /// outside can reach the panic another algorithm would meet.
    pub(crate) fn renew(
        &self,
        state: &mut State,
        now: Timestamp,
        holds: u64,
        id: &[u8],
    ) -> (Decision, Timestamp) {
        let decision = self
            .params
            .renew(state, now.as_micros(), holds, id)
            .expect("a concurrency limit");
        (decision, self.idle_at(state))
    }

    /// The holds of a `concurrency` limit's `state` that have lapsed by `now` and are
    /// still kept: a charge clears them (0 for every other algorithm).
    pub(crate) fn lapsed(&self, state: &State, now: Timestamp) -> u64 {
        self.params.lapsed(state, now.as_micros())
    }

    /// [`refund`](Limit::refund), or with `member` a [`release`](Limit::release).
    pub(crate) fn give_back(
        &self,
        state: &mut State,
        now: Timestamp,
        cost: u64,
        at: Timestamp,
        member: &[u8],
    ) -> (Decision, Timestamp) {
        let now = now.as_micros();
        self.params.refund(state, now, cost, at.as_micros(), member);
        let decision = self.params.check(state, now, 0, &[]);
        (decision, Timestamp::from_micros(self.params.idle_at(state)))
    }

    /// The most usage one charge may carry: what keeps a state's numbers exact (below
    /// 2^53) however deep its debt. A token bucket's or GCRA's debt is kept in scaled
    /// units or µs of the rate, so a charge is bounded by 2^52 of those; a counter's by
    /// 2^53 units.
    pub fn max_usage(&self) -> u64 {
        use crate::Algorithm;
        match self.algorithm() {
            Algorithm::TokenBucket | Algorithm::Gcra => {
                let (_, unit) = self.scaled_rate();
                (1u64 << 52) / unit
            }
            _ => super::MAX_EXACT,
        }
    }

    /// When `state` becomes the same as no state if nothing more is charged: the
    /// expiry a store gives it (a Redis PEXPIRE, a memory-store sweep).
    #[inline]
    pub fn idle_at(&self, state: &State) -> Timestamp {
        Timestamp::from_micros(self.params.idle_at(state))
    }
}
