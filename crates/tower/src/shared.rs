//! The state every clone of the layer and its services shares, and the decision made
//! for each request: keys, one store round for every limit at once (behind a timeout
//! and a circuit breaker), the failure policy, and the mode.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use spillway_core::headers::{self, Current, HeaderStyle, Quota, ceil_secs};
use spillway_core::{
    Clock, Decision, Guard, GuardedStore, Key, MAX_EXACT, MAX_KEY_LEN, Mode, OnStoreError, Request,
    Reservation, Source, Store, StoreFailure, Timestamp, Unanswered, longest_retry,
};

use spillway_core::algorithm::distinct::MAX_MEMBER;

use crate::Rejection;
use crate::layer::Rule;
use crate::respond::Headers;

pub(crate) type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;
pub(crate) type ActualFn = Arc<dyn Fn(&http::HeaderMap) -> Option<u64> + Send + Sync>;
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

/// What to do with a request.
pub(crate) enum Verdict {
    /// Call the inner service; add these headers to its response.
    Allow(Headers),
    /// Answer it here; the inner service is not called.
    Refuse(Refusal),
}

/// The layer's own answer.
pub(crate) enum Refusal {
    /// The shadow-ban handler's.
    ShadowBan,
    /// A rejection, with these headers.
    Reject(Rejection, Headers),
}

impl<St: Store, C: Clock> Shared<St, C> {
    /// A metered request's verdict, and whether the store charged its estimates (then
    /// when, for [`settle`](Self::settle)).
    pub async fn reserve(&self, parts: &Parts) -> (Verdict, Option<Timestamp>) {
        let at = self.clock.now();
        let (verdict, charged) = self.decide_charged(parts).await;
        (verdict, charged.then_some(at))
    }

    /// Settles a metered request once the inner service answered with `headers`: per
    /// metered rule, what `actual` reads of them against the estimate reserved at
    /// `reserved` (given back or charged as usage), or, for a request passed without a
    /// charge (`None`), what it used in full.
    pub async fn settle(
        &self,
        parts: &Parts,
        reserved: Option<Timestamp>,
        headers: &http::HeaderMap,
    ) {
        let mut settled = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let (Some(actual), Ok(key)) = (&rule.actual, self.key(i, parts)) else {
                continue;
            };
            if let Some(used) = actual(headers) {
                settled.push((i, key, used.min(MAX_EXACT)));
            }
        }
        let requests: Vec<Request<'_>> = settled
            .iter()
            .map(|(i, key, used)| {
                let rule = &self.rules[*i];
                match reserved {
                    Some(at) => Reservation {
                        estimate: self.cost_of(rule, parts),
                        at,
                    }
                    .settle(key, &rule.limit, *used),
                    None => Request::usage(key, &rule.limit, *used),
                }
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

    pub async fn decide(&self, parts: &Parts) -> Verdict {
        self.decide_charged(parts).await.0
    }

    /// The verdict, and whether the store charged every limit (admitted, answered).
    async fn decide_charged(&self, parts: &Parts) -> (Verdict, bool) {
        // One rule without a member (most layers): no vector at all, one allocation
        // (the key).
        if let [rule] = &self.rules[..]
            && rule.member.is_none()
        {
            let key = match self.key(0, parts) {
                Ok(key) => key,
                Err(missing) => return (missing, false),
            };
            let request = Request::new(&key, &rule.limit, self.cost_of(rule, parts));
            return self.decide_requests(std::slice::from_ref(&request)).await;
        }
        let mut keys = Vec::with_capacity(self.rules.len());
        for i in 0..self.rules.len() {
            match self.key(i, parts) {
                Ok(key) => keys.push(key),
                Err(missing) => return (missing, false),
            }
        }
        let mut members = Vec::with_capacity(self.rules.len());
        for rule in self.rules.iter() {
            let Some(source) = &rule.member else {
                members.push(None);
                continue;
            };
            let Some(mut member) = source.extract(parts) else {
                return (missing(rule, source), false);
            };
            let mut end = member.len().min(MAX_MEMBER);
            while !member.is_char_boundary(end) {
                end -= 1;
            }
            member.truncate(end);
            members.push(Some(member));
        }
        let requests: Vec<Request<'_>> = self
            .rules
            .iter()
            .zip(&keys)
            .zip(&members)
            .map(|((rule, key), member)| {
                let request = Request::new(key, &rule.limit, self.cost_of(rule, parts));
                match member {
                    // A request counts its member once, whatever its cost.
                    Some(m) => Request {
                        cost: request.cost.min(1),
                        ..request.with_member(m.as_bytes())
                    },
                    None => request,
                }
            })
            .collect();
        self.decide_requests(&requests).await
    }

    /// The verdict without waiting, where the store gives it at once (one rule without
    /// a member or a share, on an in-process store): no future to box, no timer, no
    /// breaker. `None` sends the request through [`decide`](Self::decide).
    pub fn decide_now(&self, parts: &Parts) -> Option<Verdict> {
        let [rule] = &self.rules[..] else {
            return None;
        };
        let store = self.store.store();
        if !store.is_local() || rule.member.is_some() || self.guards[0].sharing.is_shared() {
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
                self.verdict(std::slice::from_ref(&decision), denied_by)
            }
            Err(e) => invalid(&e),
        })
    }

    /// The cost of `rule` for this request, clamped: past 2^53 no limit could ever
    /// admit it (the same answer, without the store refusing the number).
    fn cost_of(&self, rule: &Rule, parts: &Parts) -> u64 {
        let cost = rule.cost.as_ref().or(self.cost.as_ref());
        cost.map_or(1, |f| f(parts)).min(MAX_EXACT)
    }

    /// The layer's own answer to a request it does not pass on: the shadow-ban
    /// handler's, or the rejection.
    pub fn answer<B: crate::LayerBody>(&self, refusal: Refusal, parts: &Parts) -> Response<B> {
        match refusal {
            Refusal::ShadowBan => {
                let handler = self
                    .shadow_ban
                    .as_ref()
                    .expect("a shadow-ban verdict only comes with a handler");
                handler(parts).map(B::from_bytes)
            }
            Refusal::Reject(why, headers) => crate::respond::rejection(parts, &why, headers),
        }
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

    async fn decide_requests(&self, requests: &[Request<'_>]) -> (Verdict, bool) {
        let now = self.clock.now();
        let answer = match self.store.decide(requests, &self.guards, now).await {
            Ok(answer) => answer,
            Err(Unanswered::Unavailable(failure)) => {
                self.failed(&failure);
                let refusal = Refusal::Reject(Rejection::Unavailable, Headers::default());
                return (Verdict::Refuse(refusal), false);
            }
            Err(Unanswered::Invalid(e)) => return (invalid(&e), false),
        };
        let charged = answer.failure.is_none() && answer.batch.denied_by.is_none();
        let verdict = match &answer.failure {
            None => {
                match answer.sources.first() {
                    Some(Source::Cache) => {
                        metrics::counter!("spillway_tower_deny_cache_hits_total").increment(1);
                    }
                    Some(Source::Share) => {
                        metrics::counter!("spillway_tower_share_decisions_total").increment(1);
                    }
                    _ => {}
                }
                self.verdict(&answer.batch.decisions, answer.batch.denied_by)
            }
            Some(failure) => {
                self.failed(failure);
                // Admitted without a store: no limit was counted, so no headers.
                if answer.sources.iter().all(|s| *s == Source::Open) {
                    return (Verdict::Allow(Headers::default()), false);
                }
                self.verdict(&answer.batch.decisions, answer.batch.denied_by)
            }
        };
        (verdict, charged)
    }

    /// A round the store did not answer, in metrics and (for a failed call) the log.
    fn failed(&self, failure: &StoreFailure) {
        let policy = self.on_store_error.name();
        let kind = failure.kind();
        metrics::counter!("spillway_tower_store_errors_total", "kind" => kind, "policy" => policy)
            .increment(1);
        // The breaker already says the store is down; one line per request would flood.
        if let StoreFailure::Failed(e) = failure {
            tracing::warn!(error = %e, policy, "rate limit store failed");
        }
    }

    fn verdict(&self, decisions: &[Decision], denied_by: Option<usize>) -> Verdict {
        let pass = || {
            Verdict::Allow(if self.headers_on_allowed {
                self.rate_limit_headers(decisions)
            } else {
                Headers::default()
            })
        };
        let Some(denied) = denied_by else {
            self.allowed
                .get_or_init(
                    || metrics::counter!("spillway_tower_requests_total", "outcome" => "allowed"),
                )
                .increment(1);
            return pass();
        };
        let rule = &self.rules[denied];
        let (outcome, verdict) = match (self.mode, &self.shadow_ban) {
            (Mode::Shadow, _) => ("shadow_limited", pass()),
            (Mode::Enforce, Some(_)) => ("shadow_banned", Verdict::Refuse(Refusal::ShadowBan)),
            (Mode::Enforce, None) => {
                let retry_after = longest_retry(decisions);
                let mut headers = self.rate_limit_headers(decisions);
                if let Some(wait) = retry_after {
                    let (name, value) = headers::retry_after(wait);
                    headers.push_text(name, value);
                }
                let rejection = Rejection::Limited {
                    limit: rule.name.clone(),
                    retry_after,
                };
                (
                    "limited",
                    Verdict::Refuse(Refusal::Reject(rejection, headers)),
                )
            }
        };
        metrics::counter!("spillway_tower_requests_total", "outcome" => outcome).increment(1);
        metrics::counter!("spillway_tower_denials_total", "limit" => Arc::clone(&rule.name))
            .increment(1);
        tracing::debug!(limit = &*rule.name, outcome, "rate limited");
        verdict
    }

    /// `RateLimit-Policy` / `RateLimit` (or the older forms): every limit, reporting
    /// the one [`headers::reported`] picks.
    /// The IETF style's `RateLimit-Policy` is the same on every response: written
    /// once (`ietf_policy`), only `RateLimit` is written per response.
    fn rate_limit_headers(&self, decisions: &[Decision]) -> Headers {
        let usable = |i: usize| decisions[i].usable(&self.rules[i].limit);
        let limits = decisions.iter().enumerate();
        let current =
            headers::reported(limits, |(i, d)| (!d.allowed(), usable(*i))).map_or(0, |(i, _)| i);
        let d = &decisions[current];
        let remaining = usable(current);
        let reset_secs = ceil_secs(d.retry_after().unwrap_or(d.reset_after));
        let mut out = Headers::default();
        if let Some(policy) = &self.ietf_policy {
            out.push("ratelimit-policy", policy.clone());
            let item = headers::ietf_item(&self.rules[current].name, remaining, reset_secs);
            out.push_text("ratelimit", item);
            return out;
        }
        let rendered = self.headers.render(
            self.rules.iter().map(quota),
            Current {
                quota: quota(&self.rules[current]),
                remaining,
                reset_secs,
            },
        );
        for (name, value) in rendered {
            out.push_text(name, value);
        }
        out
    }
}

/// A batch the store refused as invalid. Not seen in practice: the layer's build bounds
/// the batch, and costs are clamped. Refuse to decide rather than guess.
fn invalid(e: &spillway_core::Error) -> Verdict {
    tracing::error!(error = %e, "rate limit layer built an invalid batch");
    Verdict::Refuse(Refusal::Reject(Rejection::Unavailable, Headers::default()))
}

/// The rejection of a request without the key (or member) `source` of `rule`.
fn missing(rule: &Rule, source: &crate::KeyExtractor) -> Verdict {
    metrics::counter!("spillway_tower_requests_total", "outcome" => "missing_key").increment(1);
    let rejection = Rejection::MissingKey {
        limit: rule.name.clone(),
        source: source.describe(),
    };
    Verdict::Refuse(Refusal::Reject(rejection, Headers::default()))
}

/// A rule as the headers describe it.
pub(crate) fn quota(rule: &Rule) -> Quota<'_> {
    Quota {
        name: &rule.name,
        quota: rule.limit.limit(),
        window: rule.limit.window(),
    }
}
