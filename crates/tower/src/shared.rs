//! The state every clone of the layer and its services shares, and the decision made
//! for each request: keys, one store round for every limit at once (behind a timeout
//! and a circuit breaker), the failure policy, and the mode.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use spillway_core::headers::{self, Current, HeaderStyle, Quota, ceil_secs};
use spillway_core::{
    BatchDecision, Breaker, Clock, Error as StoreError, Key, MAX_EXACT, MemoryStore, Request,
    Store, StoreFailure, Timestamp,
};

use crate::Rejection;
use crate::layer::{Mode, OnStoreError, Rule};

pub(crate) type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;
pub(crate) type ShadowBanFn = Arc<dyn Fn(&Parts) -> Response<Bytes> + Send + Sync>;

pub(crate) struct Shared<St, C> {
    pub store: St,
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
    pub timeout: Duration,
    pub breaker: Breaker,
    /// The `OnStoreError::Local` fallback.
    pub local: MemoryStore,
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
        let default_cost = self.cost.as_ref().map_or(1, |f| f(parts));
        let requests: Vec<Request<'_>> = self
            .rules
            .iter()
            .zip(&keys)
            .map(|(rule, key)| {
                let cost = rule.cost.as_ref().map_or(default_cost, |f| f(parts));
                // Past 2^53 no limit could ever admit it: the same answer, without
                // the store refusing the number.
                Request::new(key, &rule.limit, cost.min(MAX_EXACT))
            })
            .collect();

        let now = self.clock.now();
        let batch = match self.on_store(&requests, now).await {
            Ok(batch) => batch,
            Err(failure) => match self.on_failure(failure, &requests, now) {
                Some(batch) => batch,
                None if self.on_store_error == OnStoreError::Closed => {
                    return Verdict::Reject(Rejection::Unavailable, Vec::new());
                }
                None => return Verdict::Allow(Vec::new()),
            },
        };
        self.verdict(&batch)
    }

    /// One decision round on the store, unless the breaker is open; bounded by the
    /// timeout.
    async fn on_store(
        &self,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, StoreFailure> {
        if !self.breaker.admit(now) {
            return Err(StoreFailure::BreakerOpen);
        }
        let result = tokio::time::timeout(self.timeout, self.store.check(requests, now))
            .await
            .unwrap_or(Err(StoreError::Timeout(self.timeout)));
        self.breaker.record(result, now)
    }

    /// The failure policy: a local decision, or `None` (let through or refuse).
    fn on_failure(
        &self,
        failure: StoreFailure,
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Option<BatchDecision> {
        let policy = match self.on_store_error {
            OnStoreError::Open => "open",
            OnStoreError::Closed => "closed",
            OnStoreError::Local => "local",
        };
        let kind = failure.kind();
        metrics::counter!("spillway_tower_store_errors_total", "kind" => kind, "policy" => policy)
            .increment(1);
        // The breaker already says the store is down; one line per request would flood.
        if let StoreFailure::Failed(e) = &failure {
            tracing::warn!(error = %e, policy, "rate limit store failed");
        }
        match self.on_store_error {
            OnStoreError::Local => self.local.decide(requests, now).ok(),
            OnStoreError::Open | OnStoreError::Closed => None,
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
    /// the one that denied, else the one with the least room.
    fn rate_limit_headers(&self, batch: &BatchDecision) -> Vec<(&'static str, String)> {
        let current = batch.denied_by.unwrap_or_else(|| {
            (0..batch.decisions.len())
                .min_by_key(|&i| batch.decisions[i].remaining)
                .unwrap_or(0)
        });
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
