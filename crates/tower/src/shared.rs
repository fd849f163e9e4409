//! The state every clone of the layer and its services shares, and the decision made
//! for each request: keys, one store round for every limit at once (behind a timeout
//! and a circuit breaker), the failure policy, and the mode.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use spillway_core::headers::HeaderStyle;
use spillway_core::{
    Clock, Guard, GuardedStore, Key, Limit, MAX_EXACT, MAX_KEY_LEN, Mode, OnStoreError, Report,
    Request, Reservation, Source, Store, StoreFailure, Timestamp, Unanswered,
};

use spillway_core::algorithm::distinct::MAX_MEMBER;

use crate::Rejection;
use crate::hold::Holding;
use crate::layer::Rule;
use crate::respond::Headers;

mod verdict;

pub(crate) use verdict::{Refusal, Verdict, quota};
use verdict::{invalid, missing};

pub(crate) type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;
pub(crate) type ActualFn = Arc<dyn Fn(&http::HeaderMap) -> Option<u64> + Send + Sync>;
pub(crate) type OverrideFn = Arc<dyn Fn(&str) -> Option<spillway_core::Limit> + Send + Sync>;
pub(crate) type ShadowBanFn = Arc<dyn Fn(&Parts) -> Response<Bytes> + Send + Sync>;

pub(crate) struct Shared<St, C> {
    /// The store, its breaker and timeout, and the `local` fallback.
    pub store: GuardedStore<St>,
    pub clock: C,
    pub rules: Vec<Rule>,
    /// Per rule, the key for requests without one; `None` rejects them.
    pub fallbacks: Option<Vec<Key>>,
    pub cost: Option<CostFn>,
    pub mode: Mode,
    pub shadow_ban: Option<ShadowBanFn>,
    pub headers: HeaderStyle,
    /// `RateLimit-Policy`'s value in the IETF style, written once.
    pub ietf_policy: Option<http::HeaderValue>,
    pub headers_on_allowed: bool,
    pub on_store_error: OnStoreError,
    /// One per rule, all alike (the layer's mode and policy): built once, not per request.
    pub guards: Vec<Guard>,
    /// A rule is metered ([`Rule::metered`]): requests are settled after the inner
    /// service answered.
    pub metered: bool,
    /// A rule is a `concurrency` limit: an admitted request holds its slots until its
    /// response body ends or is dropped.
    pub holds: bool,
    /// A rule may be overridden ([`Rule::overridden_by`]): each request's limits are
    /// asked for.
    pub overridable: bool,
    /// `spillway_tower_requests_total{outcome="allowed"}`, registered with the recorder
    /// on the first admission and kept: counting an admitted request is then an atomic
    /// add, not a lookup of the recorder's registry by name and labels.
    pub allowed: std::sync::OnceLock<metrics::Counter>,
}

/// Flushes the layer's `sync` counts until the layer is dropped.
pub(crate) async fn sync<St: Store, C: Clock>(shared: std::sync::Weak<Shared<St, C>>) {
    spillway_core::sharing::every_tick(|| {
        let shared = shared.upgrade();
        async move {
            let Some(shared) = shared else { return false };
            shared.store.flush(shared.clock.now()).await;
            true
        }
    })
    .await;
}

/// What a metered request reserved, carried from its reserve to its settle: each
/// metered rule's key and estimate, and when the store charged the estimates (`None`:
/// it did not, and the settle charges what was used in full).
pub(crate) struct Reserved {
    metered: Vec<(usize, Key, u64)>,
    at: Option<Timestamp>,
}

/// Whether the store charged a request's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Charge {
    /// Admitted and answered by the store: every limit charged.
    Charged,
    /// Not charged: denied, refused, or decided without a store call.
    No,
    /// The store was called and did not answer (a timeout, an error): it may have
    /// charged.
    Unknown,
}

impl<St: Store + 'static, C: Clock + 'static> Shared<St, C> {
    /// The verdict, and the holds an admitted request took. The holds are armed
    /// before the store call: a request dropped during it (its client gone) or one
    /// the store did not answer (a timed-out take may have committed) gives back what
    /// it may have taken.
    pub async fn decide(self: &Arc<Self>, parts: &Parts) -> (Verdict, Option<Holding>) {
        let id = self.holds.then(spillway_core::new_hold_id);
        let armed = self.arm(parts, id.as_deref());
        let (verdict, charge, _) = self.decide_charged(parts, id.as_deref()).await;
        (verdict, kept(armed, charge))
    }

    /// A metered request's verdict, what it reserved for [`settle`](Self::settle), and
    /// the holds it took (armed before the store call, as [`decide`](Self::decide)'s).
    pub async fn reserve(self: &Arc<Self>, parts: &Parts) -> (Verdict, Reserved, Option<Holding>) {
        let at = self.clock.now();
        let id = self.holds.then(spillway_core::new_hold_id);
        let armed = self.arm(parts, id.as_deref());
        let (verdict, charge, keys) = self.decide_charged(parts, id.as_deref()).await;
        // The keys the decision was made on; a lone rule's was not kept.
        let key = |i: usize| keys.get(i).cloned().or_else(|| self.key(i, parts).ok());
        let metered = (self.rules.iter().enumerate())
            .filter(|(_, rule)| rule.actual.is_some())
            .filter_map(|(i, rule)| Some((i, key(i)?, self.cost_of(rule, parts))))
            .collect();
        let at = (charge == Charge::Charged).then_some(at);
        (verdict, Reserved { metered, at }, kept(armed, charge))
    }

    /// The holds named `id` a request is about to take, given back when the
    /// [`Holding`] is dropped: `None` without an id, or when a rule's key is missing
    /// (the request is refused before any store call).
    fn arm(self: &Arc<Self>, parts: &Parts, id: Option<&[u8]>) -> Option<Armed<St, C>> {
        let id: Box<[u8]> = id?.into();
        let mut held = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.limit.algorithm().holds() {
                held.push((i, self.key(i, parts).ok()?, self.cost_of(rule, parts)));
            }
        }
        let taken = Arc::new(Taken {
            shared: Arc::clone(self),
            held,
            id,
        });
        let released = Arc::clone(&taken);
        let holding = Holding::new(move || {
            let local = released.shared.store.store().is_local();
            spillway_core::release_detached(local, async move {
                // Past the breaker: a take the store may have charged is given back
                // even while the breaker is open (takes are not sent then, so none
                // come here). A release that fails leaves the holds to their lease.
                let shared = &released.shared;
                let releases: Vec<Request<'_>> = (released.held.iter())
                    .map(|(i, key, _)| Request::release(key, &shared.rules[*i].limit, &released.id))
                    .collect();
                let _ = Store::check(shared.store.store(), &releases, shared.clock.now()).await;
            });
        });
        Some(Armed { holding, taken })
    }
}

/// The holds a request is about to take ([`Shared::arm`]): the holding that gives them
/// back, and what renews them.
struct Armed<St, C> {
    holding: Holding,
    taken: Arc<Taken<St, C>>,
}

/// A request's holds: per `concurrency` rule, its index, key and slots; and their id.
struct Taken<St, C> {
    shared: Arc<Shared<St, C>>,
    held: Vec<(usize, Key, u64)>,
    id: Box<[u8]>,
}

impl<St: Store + 'static, C: Clock + 'static> Taken<St, C> {
    /// Half the shortest lease: how often the holds are renewed while held.
    fn period(&self) -> std::time::Duration {
        let leases = self
            .held
            .iter()
            .map(|(i, ..)| self.shared.rules[*i].limit.window());
        let shortest = leases.min().unwrap_or_default();
        (shortest / 2).max(std::time::Duration::from_millis(1))
    }

    /// Renews every hold, each on its own (one that lapsed and whose slots were taken
    /// does not keep the others from renewing): its lease starts again. Through the
    /// breaker and timeout; a renewal denied or unanswered is counted and tried again
    /// at the next period.
    async fn renew(&self) {
        let shared = &self.shared;
        for (i, key, holds) in &self.held {
            let renewal = Request::renew(key, &shared.rules[*i].limit, &self.id, *holds);
            let now = shared.clock.now();
            let renewed = Store::check(&shared.store, &[renewal], now).await;
            if !renewed.is_ok_and(|b| b.denied_by.is_none()) {
                metrics::counter!("spillway_tower_renewals_failed_total").increment(1);
            }
        }
    }
}

/// What becomes of the holds `armed` before a store call that `charge`d: kept by an
/// admitted request (renewed every half lease, for its response to give back), given
/// back now when the store may have charged them without saying so, and forgotten when
/// nothing was taken.
fn kept<St: Store + 'static, C: Clock + 'static>(
    armed: Option<Armed<St, C>>,
    charge: Charge,
) -> Option<Holding> {
    let Armed { holding, taken } = armed?;
    match charge {
        Charge::Charged => {
            let period = taken.period();
            Some(holding.renewing(period, move || {
                let taken = Arc::clone(&taken);
                async move { taken.renew().await }
            }))
        }
        Charge::Unknown => {
            drop(holding);
            None
        }
        Charge::No => {
            holding.disarm();
            None
        }
    }
}

impl<St: Store, C: Clock> Shared<St, C> {
    /// Settles a metered request once the inner service answered with `headers`: per
    /// metered rule, what `actual` reads of them against the estimate `reserved` (given
    /// back or charged as usage, [`Reservation::settlement`]), or, for a request passed
    /// without a charge, what it used in full.
    pub async fn settle(&self, reserved: Reserved, headers: &http::HeaderMap) {
        let requests: Vec<Request<'_>> = (reserved.metered.iter())
            .filter_map(|(i, key, estimate)| {
                let rule = &self.rules[*i];
                let used = rule.actual.as_ref()?(headers)?.min(MAX_EXACT);
                Some(match reserved.at {
                    Some(at) => Reservation {
                        estimate: *estimate,
                        at,
                    }
                    .settle(key, &rule.limit, used),
                    None => Request::usage(key, &rule.limit, used),
                })
            })
            .collect();
        if requests.is_empty() {
            return;
        }
        if let Err(e) = Store::check(&self.store, &requests, self.clock.now()).await {
            metrics::counter!("spillway_tower_settle_errors_total").increment(1);
            tracing::warn!(error = %e, "a metered request's usage was not settled");
        }
    }

    /// The verdict, whether the store charged every limit (admitted, answered), and
    /// every rule's key, in order (none when a lone rule was decided without a vector,
    /// or the request was refused first). `id` names the holds the request takes of
    /// `concurrency` limits.
    async fn decide_charged(
        &self,
        parts: &Parts,
        id: Option<&[u8]>,
    ) -> (Verdict, Charge, Vec<Key>) {
        // One rule without a member (most layers): no vector at all, one allocation
        // (the key).
        if let [rule] = &self.rules[..]
            && rule.member.is_none()
            && id.is_none()
        {
            let key = match self.key(0, parts) {
                Ok(key) => key,
                Err(missing) => return (missing, Charge::No, Vec::new()),
            };
            let limit = self.limit_of(rule, parts);
            let request = Request::new(&key, &limit, self.cost_of(rule, parts));
            let (verdict, charged) = self.decide_requests(std::slice::from_ref(&request)).await;
            return (verdict, charged, Vec::new());
        }
        let mut keys = Vec::with_capacity(self.rules.len());
        for i in 0..self.rules.len() {
            match self.key(i, parts) {
                Ok(key) => keys.push(key),
                Err(missing) => return (missing, Charge::No, Vec::new()),
            }
        }
        let mut members = Vec::with_capacity(self.rules.len());
        for rule in self.rules.iter() {
            if let Some(id) = id.filter(|_| rule.limit.algorithm().holds()) {
                members.push(Some(Member::Hold(id)));
                continue;
            }
            let Some(source) = &rule.member else {
                members.push(None);
                continue;
            };
            if rule.limit.algorithm().shares() {
                members.push(Some(Member::Share(share_member(rule, source, parts))));
                continue;
            }
            let Some(mut member) = source.extract(parts) else {
                return (missing(rule, source), Charge::No, Vec::new());
            };
            let mut end = member.len().min(MAX_MEMBER);
            while !member.is_char_boundary(end) {
                end -= 1;
            }
            member.truncate(end);
            members.push(Some(Member::Counted(member)));
        }
        // Each rule's limit for this request; none kept (no allocation) while no rule
        // can be overridden.
        let limits: Vec<Cow<'_, Limit>> = match self.overridable {
            true => (self.rules.iter())
                .map(|rule| self.limit_of(rule, parts))
                .collect(),
            false => Vec::new(),
        };
        let requests: Vec<Request<'_>> = self
            .rules
            .iter()
            .zip(&keys)
            .zip(&members)
            .enumerate()
            .map(|(i, ((rule, key), member))| {
                let limit = limits.get(i).map_or(&rule.limit, |l| l);
                let request = Request::new(key, limit, self.cost_of(rule, parts));
                match member {
                    // A request counts its member once, whatever its cost.
                    Some(Member::Counted(m)) => Request {
                        cost: request.cost.min(1),
                        ..request.with_member(m.as_bytes())
                    },
                    // Its cost is the slots it holds.
                    Some(Member::Hold(id)) => request.with_member(id),
                    Some(Member::Share(m)) => request.with_member(m),
                    None => request,
                }
            })
            .collect();
        let (verdict, charged) = self.decide_requests(&requests).await;
        drop(requests);
        (verdict, charged, keys)
    }

    /// The verdict without waiting, where the store gives it at once (one rule without
    /// a member or a share, on an in-process store): no future to box, no timer, no
    /// breaker. `None` sends the request through [`decide`](Self::decide).
    pub fn decide_now(&self, parts: &Parts) -> Option<Verdict> {
        let [rule] = &self.rules[..] else {
            return None;
        };
        let store = self.store.store();
        if !store.is_local()
            || rule.member.is_some()
            || rule.overridden.is_some()
            || self.holds
            || self.guards[0].sharing.is_shared()
        {
            return None;
        }
        let now = self.clock.now();
        let decided = match rule.key.extract_borrowed(parts) {
            // The key's parts as they are: the store builds the key only when it is new.
            Some(value) if rule.name.len() + 1 + value.len() <= MAX_KEY_LEN => {
                let parts_of_key = [&rule.name, ":", &*value];
                let cost = self.cost_of(rule, parts);
                store.check_joined_now(&parts_of_key, &rule.limit, cost, now)?
            }
            // No value, or too long a key: the fallback key, or the rejection (asking
            // no cost of a request without a key, as before).
            _ => {
                let key = match self.key(0, parts) {
                    Ok(key) => key,
                    Err(missing) => return Some(missing),
                };
                let request = Request::new(&key, &rule.limit, self.cost_of(rule, parts));
                store.check_one_now(request, now)?
            }
        };
        Some(match decided {
            Ok(decision) => {
                let denied_by = (!decision.allowed()).then_some(0);
                self.verdict(std::slice::from_ref(&decision), denied_by, None)
            }
            Err(e) => invalid(&e),
        })
    }

    /// `rule`'s limit for this request: the one set for its key's value
    /// ([`Rule::overridden_by`]), else its own. A limit set that the request could not
    /// be decided on as the rule's is passed over (the rule's own applies): one that
    /// holds or shares (its state outlives the request), or one that counts members
    /// where the rule does not, or the other way round.
    fn limit_of<'r>(&self, rule: &'r Rule, parts: &Parts) -> Cow<'r, Limit> {
        let fits = |set: &Limit| {
            let (a, own) = (set.algorithm(), rule.limit.algorithm());
            !a.holds() && set.shares().is_none() && a.counts_members() == own.counts_members()
        };
        let set = (rule.overridden.as_ref())
            .and_then(|limit_of| limit_of(&rule.key.extract_borrowed(parts)?))
            .filter(fits);
        set.map_or(Cow::Borrowed(&rule.limit), Cow::Owned)
    }

    /// The cost of `rule` for this request, clamped: past 2^53 no limit could ever
    /// admit it (the same answer, without the store refusing the number).
    fn cost_of(&self, rule: &Rule, parts: &Parts) -> u64 {
        let cost = rule.cost.as_ref().or(self.cost.as_ref());
        cost.map_or(1, |f| f(parts)).min(MAX_EXACT)
    }

    /// Rule `i`'s key for this request (`<rule name>:<value>`, built in one
    /// allocation), its fallback key, or the rejection of a request without one.
    fn key(&self, i: usize, parts: &Parts) -> Result<Key, Verdict> {
        let rule = &self.rules[i];
        let key = rule
            .key
            .extract_borrowed(parts)
            .and_then(|value| Key::joined(&[&rule.name, ":", &value]).ok());
        match (key, &self.fallbacks) {
            (Some(key), _) => Ok(key),
            (None, Some(fallbacks)) => Ok(fallbacks[i].clone()),
            (None, None) => Err(missing(rule, &rule.key)),
        }
    }

    async fn decide_requests(&self, requests: &[Request<'_>]) -> (Verdict, Charge) {
        let now = self.clock.now();
        let result = self.store.decide(requests, &self.guards, now).await;
        spillway_core::report(result.as_ref(), self);
        let answer = match result {
            Ok(answer) => answer,
            Err(Unanswered::Unavailable(failure)) => {
                let refusal = Refusal::Reject(Rejection::Unavailable, Headers::default());
                return (Verdict::Refuse(refusal), unknown_if_called(&failure));
            }
            Err(Unanswered::Invalid(e)) => return (invalid(&e), Charge::No),
        };
        let charged = match &answer.failure {
            Some(failure) => unknown_if_called(failure),
            None if answer.batch.denied_by.is_none() => Charge::Charged,
            None => Charge::No,
        };
        // Admitted without a store: no limit was counted, so no headers.
        if answer.failure.is_some() && answer.sources.iter().all(|s| *s == Source::Open) {
            return (
                Verdict::Allow(Headers::default(), std::time::Duration::ZERO),
                charged,
            );
        }
        let verdict = self.verdict(
            &answer.batch.decisions,
            answer.batch.denied_by,
            Some(requests),
        );
        (verdict, charged)
    }
}

/// A store call that failed may have charged (a timeout after the script ran); one
/// the breaker kept from the store did not.
fn unknown_if_called(failure: &StoreFailure) -> Charge {
    match failure {
        StoreFailure::BreakerOpen => Charge::No,
        _ => Charge::Unknown,
    }
}

/// What a request brings to a limit that reads a member.
enum Member<'a> {
    /// What a `distinct` limit counts, read from the request.
    Counted(String),
    /// The id of the request's holds of `concurrency` limits.
    Hold(&'a [u8]),
    /// A `shares` limit's child and priority.
    Share(Vec<u8>),
}

/// A `shares` rule's member for a request: the child `source` reads (none, or one the
/// tree does not list, is `*`), at the priority its `Rule::priority` reads (none, or
/// a name not listed, is the lowest).
fn share_member(rule: &crate::layer::Rule, source: &crate::KeyExtractor, parts: &Parts) -> Vec<u8> {
    let child = source.extract(parts).unwrap_or_default();
    let level = match &rule.priority {
        Some((from, names)) => {
            spillway_core::algorithm::shares::level(names, from.extract(parts).as_deref())
        }
        None => 0,
    };
    rule.limit.share_member(&child, level)
}

/// A round's answer in the layer's metrics and log.
impl<St: Store, C: Clock> Report for Shared<St, C> {
    fn failed(&self, failure: &StoreFailure, _closed: bool) {
        let policy = self.on_store_error.name();
        let kind = failure.kind();
        metrics::counter!("spillway_tower_store_errors_total", "kind" => kind, "policy" => policy)
            .increment(1);
        // The breaker already says the store is down; one line per request would flood.
        if let StoreFailure::Failed(e) = failure {
            tracing::warn!(error = %e, policy, "rate limit store failed");
        }
    }

    /// Counted per request: by its first limit's answer.
    fn answered_by(&self, i: usize, source: Source) {
        match source {
            Source::Cache if i == 0 => {
                metrics::counter!("spillway_tower_deny_cache_hits_total").increment(1);
            }
            Source::Share if i == 0 => {
                metrics::counter!("spillway_tower_share_decisions_total").increment(1);
            }
            _ => {}
        }
    }
}
