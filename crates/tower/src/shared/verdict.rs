//! What a request is told: the verdict from the store's decisions (pass, refuse, or
//! shadow-ban), the rate limit headers, and the layer's own answer when it refuses.

use std::sync::Arc;

use http::Response;
use http::request::Parts;
use spillway_core::headers::{self, Current, Quota, ceil_secs};
use spillway_core::{Clock, Decision, Limit, Mode, Request, Store, longest_retry};

use super::Shared;
use crate::Rejection;
use crate::layer::Rule;
use crate::respond::Headers;

/// What to do with a request.
pub(crate) enum Verdict {
    /// Call the inner service, after the wait (a rule's `max_wait`; zero: at once);
    /// add these headers to its response.
    Allow(Headers, std::time::Duration),
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

    /// The verdict of `decisions`, made on the rules' own limits or, when given, on
    /// `requests`' (a rule [overridden](crate::Rule::overridden_by) for this request).
    pub(super) fn verdict(
        &self,
        decisions: &[Decision],
        denied_by: Option<usize>,
        requests: Option<&[Request<'_>]>,
    ) -> Verdict {
        let headers = || {
            if self.headers_on_allowed {
                self.rate_limit_headers(decisions, requests)
            } else {
                Headers::default()
            }
        };
        // A shadow layer passes at once: it only notes what it would do.
        let pass = || Verdict::Allow(headers(), std::time::Duration::ZERO);
        let Some(denied) = denied_by else {
            self.allowed
                .get_or_init(
                    || metrics::counter!("spillway_tower_requests_total", "outcome" => "allowed"),
                )
                .increment(1);
            let wait = match self.mode {
                Mode::Enforce => decisions.iter().map(|d| d.wait).max().unwrap_or_default(),
                Mode::Shadow => std::time::Duration::ZERO,
            };
            return Verdict::Allow(headers(), wait);
        };
        let rule = &self.rules[denied];
        let (outcome, verdict) = match (self.mode, &self.shadow_ban) {
            (Mode::Shadow, _) => ("shadow_limited", pass()),
            (Mode::Enforce, Some(_)) => ("shadow_banned", Verdict::Refuse(Refusal::ShadowBan)),
            (Mode::Enforce, None) => {
                let retry_after = longest_retry(decisions);
                let mut headers = self.rate_limit_headers(decisions, requests);
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
    /// A rule overridden for this request (`requests` says its limit) is reported as
    /// its limit: the policy is then written for this response.
    fn rate_limit_headers(
        &self,
        decisions: &[Decision],
        requests: Option<&[Request<'_>]>,
    ) -> Headers {
        let limit = |i: usize| requests.map_or(&self.rules[i].limit, |r| r[i].limit);
        let usable = |i: usize| decisions[i].usable(limit(i));
        let quotas = || (self.rules.iter().enumerate()).map(|(i, rule)| quota_of(rule, limit(i)));
        let overridden =
            (self.rules.iter().enumerate()).any(|(i, rule)| !std::ptr::eq(limit(i), &rule.limit));
        let limits = decisions.iter().enumerate();
        let current =
            headers::reported(limits, |(i, d)| (!d.allowed(), usable(*i))).map_or(0, |(i, _)| i);
        let d = &decisions[current];
        let remaining = usable(current);
        let reset_secs = ceil_secs(d.retry_after().unwrap_or(d.reset_after));
        let mut out = Headers::default();
        if let Some(policy) = &self.ietf_policy {
            match overridden {
                false => out.push("ratelimit-policy", policy.clone()),
                true => {
                    let policy = self.headers.ietf_policy(quotas()).unwrap_or_default();
                    out.push_text("ratelimit-policy", policy);
                }
            }
            let item = headers::ietf_item(&self.rules[current].name, remaining, reset_secs);
            out.push_text("ratelimit", item);
            return out;
        }
        let rendered = self.headers.render(
            quotas(),
            Current {
                quota: quota_of(&self.rules[current], limit(current)),
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
pub(super) fn invalid(e: &spillway_core::Error) -> Verdict {
    tracing::error!(error = %e, "rate limit layer built an invalid batch");
    Verdict::Refuse(Refusal::Reject(Rejection::Unavailable, Headers::default()))
}

/// The rejection of a request without the key (or member) `source` of `rule`.
pub(super) fn missing(rule: &Rule, source: &crate::KeyExtractor) -> Verdict {
    metrics::counter!("spillway_tower_requests_total", "outcome" => "missing_key").increment(1);
    let rejection = Rejection::MissingKey {
        limit: rule.name.clone(),
        source: source.describe(),
    };
    Verdict::Refuse(Refusal::Reject(rejection, Headers::default()))
}

/// A rule as the headers describe it.
pub(crate) fn quota(rule: &Rule) -> Quota<'_> {
    quota_of(rule, &rule.limit)
}

/// A rule with `limit` (its own, or the one set for a request's key) as the headers
/// describe it.
fn quota_of<'a>(rule: &'a Rule, limit: &Limit) -> Quota<'a> {
    Quota {
        name: &rule.name,
        quota: limit.limit(),
        window: limit.window(),
    }
}
