//! The state every clone of the layer and its services shares, and the decision made
//! for each request: keys, one store round for every limit at once (behind a timeout
//! and a circuit breaker), the failure policy, and the mode.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use spillway_core::headers::{self, Current, HeaderStyle, Quota, ceil_secs};
use spillway_core::{
    BatchDecision, Clock, Guard, GuardedStore, Key, MAX_EXACT, Mode, OnStoreError, Request, Source,
    Store, StoreFailure, Unanswered,
};

use spillway_core::algorithm::distinct::MAX_MEMBER;

use crate::Rejection;
use crate::layer::Rule;

pub(crate) type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;
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
    pub headers_on_allowed: bool,
    pub on_store_error: OnStoreError,
    /// One per rule, all alike (the layer's mode and policy): built once, not per request.
    pub guards: Vec<Guard>,
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
    Allow(Vec<(&'static str, String)>),
    /// Answer with the shadow-ban handler; the inner service is not called.
    ShadowBan,
    /// Refuse it, with these headers.
    Reject(Rejection, Vec<(&'static str, String)>),
}

impl<St: Store, C: Clock> Shared<St, C> {
    pub async fn decide(&self, parts: &Parts) -> Verdict {
        let mut keys = Vec::with_capacity(self.rules.len());
        for (i, rule) in self.rules.iter().enumerate() {
            let key = rule
                .key
                .extract(parts)
                .and_then(|value| Key::new(format!("{}:{value}", rule.name)).ok());
            match (key, &self.fallbacks) {
                (Some(key), _) => keys.push(key),
                (None, Some(fallbacks)) => keys.push(fallbacks[i].clone()),
                (None, None) => {
                    metrics::counter!("spillway_tower_requests_total", "outcome" => "missing_key")
                        .increment(1);
                    let rejection = Rejection::MissingKey {
                        limit: rule.name.clone(),
                        source: rule.key.describe(),
                    };
                    return Verdict::Reject(rejection, Vec::new());
                }
            }
        }
        let mut members = Vec::with_capacity(self.rules.len());
        for rule in self.rules.iter() {
            let Some(source) = &rule.member else {
                members.push(None);
                continue;
            };
            let Some(mut member) = source.extract(parts) else {
                metrics::counter!("spillway_tower_requests_total", "outcome" => "missing_key")
                    .increment(1);
                let rejection = Rejection::MissingKey {
                    limit: rule.name.clone(),
                    source: source.describe(),
                };
                return Verdict::Reject(rejection, Vec::new());
            };
            let mut end = member.len().min(MAX_MEMBER);
            while !member.is_char_boundary(end) {
                end -= 1;
            }
            member.truncate(end);
            members.push(Some(member));
        }
        let default_cost = self.cost.as_ref().map_or(1, |f| f(parts));
        let requests: Vec<Request<'_>> = self
            .rules
            .iter()
            .zip(&keys)
            .zip(&members)
            .map(|((rule, key), member)| {
                let cost = rule.cost.as_ref().map_or(default_cost, |f| f(parts));
                // Past 2^53 no limit could ever admit it: the same answer, without
                // the store refusing the number.
                let request = Request::new(key, &rule.limit, cost.min(MAX_EXACT));
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

        let now = self.clock.now();
        let answer = match self.store.decide(&requests, &self.guards, now).await {
            Ok(answer) => answer,
            Err(Unanswered::Unavailable(failure)) => {
                self.failed(&failure);
                return Verdict::Reject(Rejection::Unavailable, Vec::new());
            }
            // Not seen in practice: the layer's build bounds the batch, and costs are
            // clamped above. Refuse to decide rather than guess.
            Err(Unanswered::Invalid(e)) => {
                tracing::error!(error = %e, "rate limit layer built an invalid batch");
                return Verdict::Reject(Rejection::Unavailable, Vec::new());
            }
        };
        match &answer.failure {
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
                self.verdict(&answer.batch)
            }
            Some(failure) => {
                self.failed(failure);
                // Admitted without a store: no limit was counted, so no headers.
                if answer.sources.iter().all(|s| *s == Source::Open) {
                    return Verdict::Allow(Vec::new());
                }
                self.verdict(&answer.batch)
            }
        }
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

    fn verdict(&self, batch: &BatchDecision) -> Verdict {
        let pass = || {
            Verdict::Allow(if self.headers_on_allowed {
                self.rate_limit_headers(batch)
            } else {
                Vec::new()
            })
        };
        let Some(denied) = batch.denied_by else {
            metrics::counter!("spillway_tower_requests_total", "outcome" => "allowed").increment(1);
            return pass();
        };
        let rule = &self.rules[denied];
        let (outcome, verdict) = match (self.mode, &self.shadow_ban) {
            (Mode::Shadow, _) => ("shadow_limited", pass()),
            (Mode::Enforce, Some(_)) => ("shadow_banned", Verdict::ShadowBan),
            (Mode::Enforce, None) => {
                let retry_after = batch.retry_after();
                let mut headers = self.rate_limit_headers(batch);
                if let Some(wait) = retry_after {
                    headers.push(headers::retry_after(wait));
                }
                let rejection = Rejection::Limited {
                    limit: rule.name.clone(),
                    retry_after,
                };
                ("limited", Verdict::Reject(rejection, headers))
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
    fn rate_limit_headers(&self, batch: &BatchDecision) -> Vec<(&'static str, String)> {
        let limits = batch.decisions.iter().enumerate();
        let current =
            headers::reported(limits, |(_, d)| (!d.allowed(), d.remaining)).map_or(0, |(i, _)| i);
        let d = &batch.decisions[current];
        self.headers.render(
            self.rules.iter().map(quota),
            Current {
                quota: quota(&self.rules[current]),
                remaining: d.remaining,
                reset_secs: ceil_secs(d.retry_after().unwrap_or(d.reset_after)),
            },
        )
    }
}

/// A rule as the headers describe it.
fn quota(rule: &Rule) -> Quota<'_> {
    Quota {
        name: &rule.name,
        quota: rule.limit.limit(),
        window: rule.limit.window(),
    }
}
