//! [`RateLimitLayerBuilder`]: the layer's settings, each checked when it is built.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use spillway_core::headers::HeaderStyle;
use spillway_core::{
    Breaker, Clock, Guard, GuardedStore, Key, MAX_BATCH, Mode, OnStoreError, Sharing, Store,
};

use crate::Error;
use crate::shared::Shared;

use super::{MissingKey, RateLimitLayer, RateLimitLayerBuilder, Rule};

impl<St: Store + 'static, C: Clock + 'static> RateLimitLayerBuilder<St, C> {
    /// Decides at the time `clock` says (default: the process's
    /// [`CoarseClock`](spillway_core::CoarseClock), millisecond steps;
    /// [`SystemClock`](spillway_core::SystemClock) for finer,
    /// [`ManualClock`](spillway_core::ManualClock) in tests). A Redis store in server-time mode uses Redis's clock for limits; this
    /// one still times the circuit breaker.
    pub fn clock<C2: Clock>(self, clock: C2) -> RateLimitLayerBuilder<St, C2> {
        RateLimitLayerBuilder {
            store: self.store,
            clock,
            rules: self.rules,
            cost: self.cost,
            missing_key: self.missing_key,
            mode: self.mode,
            shadow_ban: self.shadow_ban,
            headers: self.headers,
            headers_on_allowed: self.headers_on_allowed,
            on_store_error: self.on_store_error,
            timeout: self.timeout,
            breaker: self.breaker,
            deny_cache: self.deny_cache,
        }
    }

    /// Adds a limit. Every request is checked against all of them at once: admitted
    /// and charged by all, or refused and charged by none.
    pub fn limit(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// What a request costs, for limits without their own cost (default 1).
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.cost = Some(Arc::new(cost));
        self
    }

    /// What to do when a limit finds no key in a request (default: 400).
    pub fn on_missing_key(mut self, missing: MissingKey) -> Self {
        self.missing_key = missing;
        self
    }

    /// Enforce denials, or only record them (default: enforce).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Answers denied requests with `handler` instead of a 429, without calling the
    /// inner service: the client sees what looks like success and has no signal to
    /// rotate keys or addresses against (a shadow ban). In [`Mode::Shadow`] nothing is
    /// denied, so the handler is not used.
    pub fn shadow_ban<F, B>(mut self, handler: F) -> Self
    where
        F: Fn(&Parts) -> Response<B> + Send + Sync + 'static,
        B: Into<Bytes>,
    {
        self.shadow_ban = Some(Arc::new(move |parts: &Parts| {
            handler(parts).map(Into::into)
        }));
        self
    }

    /// Which rate limit headers denials carry (default: IETF `RateLimit-Policy` +
    /// `RateLimit`). `Retry-After` is always sent on a 429 that a wait can cure.
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.headers = style;
        self
    }

    /// Adds the rate limit headers to admitted responses too (default: off).
    pub fn headers_on_allowed(mut self, on: bool) -> Self {
        self.headers_on_allowed = on;
        self
    }

    /// What happens when the store fails or times out (default: open).
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_store_error = policy;
        self
    }

    /// How long to wait for the store (default 20 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Once the last second's store calls hold at least `failures` failures, and they are
    /// at least half of its calls, stop calling it for `cooldown` (defaults: 5 and
    /// 500 ms), so a dead store costs nothing instead of a timeout, and a stall that times
    /// out a few calls among many does not turn every call of the cool-down away
    /// ([`Breaker::new`](spillway_core::Breaker::new)).
    pub fn circuit_breaker(mut self, failures: u32, cooldown: Duration) -> Self {
        self.breaker = (failures, cooldown);
        self
    }

    /// Sizes the deny cache (keys the store denied until a known time, answered here
    /// until then, exactly; see [`DenyCache`](spillway_core::DenyCache)) at `bytes`; 0
    /// turns it off. Default: 16 MiB with a remote store, off with a `MemoryStore`.
    pub fn deny_cache(mut self, bytes: usize) -> Self {
        self.deny_cache = Some(bytes);
        self
    }

    /// Checks the configuration and builds the layer.
    pub fn build(self) -> Result<RateLimitLayer<St, C>, Error> {
        if self.rules.is_empty() {
            return Err(Error::NoLimits);
        }
        if self.rules.len() > MAX_BATCH {
            return Err(Error::TooManyLimits(self.rules.len()));
        }
        if self.timeout.is_zero() {
            return Err(Error::ZeroTimeout(self.timeout));
        }
        let mut fallbacks = Vec::with_capacity(self.rules.len());
        for (i, rule) in self.rules.iter().enumerate() {
            let name = &*rule.name;
            if !valid_name(name) {
                return Err(Error::InvalidName(name.into()));
            }
            if self.rules[..i].iter().any(|r| r.name == rule.name) {
                return Err(Error::DuplicateName(name.into()));
            }
            let holds = rule.limit.algorithm().holds();
            let shares = rule.limit.shares();
            let levels = shares.map_or(0, |s| usize::from(s.levels().0));
            let priority_error = match (&rule.priority, shares) {
                (Some(_), None) => Some("`Rule::priority` applies to shares limits only"),
                (Some((_, names)), Some(_)) if names.len() != levels => {
                    Some("`Rule::priority` names as many priorities as the limit has levels")
                }
                (None, Some(_)) if levels > 1 => {
                    Some("a shares limit with priorities needs `Rule::priority`")
                }
                _ => None,
            };
            if let Some(message) = priority_error {
                return Err(Error::InvalidKeySource {
                    limit: name.into(),
                    message: message.into(),
                });
            }
            let member_error = match (
                rule.limit.algorithm().counts_members() || shares.is_some(),
                &rule.member,
            ) {
                (false, Some(_)) if holds => Some(
                    "a concurrency limit's holds are named by the layer, one per request: \
                     no `Rule::member`",
                ),
                (true, None) if shares.is_some() => {
                    Some("a shares limit needs `Rule::member`: the request's child")
                }
                (true, None) => Some("a distinct limit needs `Rule::member`: what to count"),
                (false, Some(_)) => {
                    Some("`Rule::member` applies to distinct and shares limits only")
                }
                (true, Some(m)) => m.errors().first().map(String::as_str),
                (false, None) => None,
            };
            if let Some(message) = member_error {
                return Err(Error::InvalidKeySource {
                    limit: name.into(),
                    message: message.into(),
                });
            }
            if let Some(message) = rule.key.errors().first() {
                return Err(Error::InvalidKeySource {
                    limit: name.into(),
                    message: message.clone(),
                });
            }
            if let MissingKey::Fallback(value) = &self.missing_key {
                let key = Key::new(format!("{name}:{value}"))
                    .map_err(|e| Error::InvalidFallback(e.to_string()))?;
                fallbacks.push(key);
            }
        }
        for rule in &self.rules {
            let algorithm = rule.limit.algorithm();
            if rule.overridden.is_some()
                && (algorithm.holds()
                    || algorithm.shares()
                    || rule.actual.is_some()
                    || rule.sharing.is_shared())
            {
                return Err(Error::InvalidSharing {
                    limit: rule.name.to_string(),
                    message: "`Rule::overridden_by` takes a limit decided on one request's \
                              limit alone: not a concurrency, shares, metered, lease or sync \
                              limit"
                        .into(),
                });
            }
            if rule.actual.is_some() && !rule.limit.algorithm().refunds() {
                return Err(Error::InvalidSharing {
                    limit: rule.name.to_string(),
                    message: format!(
                        "a metered limit gives back what a response did not use: \
                         fixed_window, token_bucket or gcra only, not {}",
                        rule.limit.algorithm()
                    ),
                });
            }
            if rule.actual.is_some() && rule.sharing.is_shared() {
                return Err(Error::InvalidSharing {
                    limit: rule.name.to_string(),
                    message: "a metered limit is settled on the store: not with lease or sync"
                        .into(),
                });
            }
            rule.sharing
                .check(&rule.limit)
                .map_err(|message| Error::InvalidSharing {
                    limit: rule.name.to_string(),
                    message,
                })?;
        }
        let syncs = self
            .rules
            .iter()
            .any(|r| matches!(r.sharing, Sharing::Sync { .. }));
        let runtime = tokio::runtime::Handle::try_current();
        if syncs && runtime.is_err() {
            return Err(Error::NoRuntime);
        }
        let guards = self
            .rules
            .iter()
            .map(|r| Guard::new(self.mode, self.on_store_error).sharing(r.sharing))
            .collect();
        let breaker = Breaker::new(self.breaker.0, self.breaker.1);
        let mut store = GuardedStore::new(self.store, breaker).timeout(self.timeout);
        if let Some(bytes) = self.deny_cache {
            store = store.deny_cache(bytes);
        }
        let ietf_policy = self
            .headers
            .ietf_policy(self.rules.iter().map(crate::shared::quota))
            .and_then(|v| http::HeaderValue::try_from(v).ok());
        let metered = self.rules.iter().any(|r| r.actual.is_some());
        let holds = self.rules.iter().any(|r| r.limit.algorithm().holds());
        let overridable = self.rules.iter().any(|r| r.overridden.is_some());
        let shared = Shared {
            store,
            clock: self.clock,
            rules: self.rules,
            fallbacks: (!fallbacks.is_empty()).then_some(fallbacks),
            cost: self.cost,
            mode: self.mode,
            shadow_ban: self.shadow_ban,
            headers: self.headers,
            ietf_policy,
            headers_on_allowed: self.headers_on_allowed,
            on_store_error: self.on_store_error,
            guards,
            metered,
            holds,
            overridable,
            allowed: Default::default(),
        };
        let shared = Arc::new(shared);
        if let (true, Ok(runtime)) = (syncs, runtime) {
            runtime.spawn(crate::shared::sync(Arc::downgrade(&shared)));
        }
        Ok(RateLimitLayer { shared })
    }
}

impl<St, C> fmt::Debug for RateLimitLayerBuilder<St, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("rules", &self.rules)
            .field("missing_key", &self.missing_key)
            .field("mode", &self.mode)
            .field("on_store_error", &self.on_store_error)
            .finish_non_exhaustive()
    }
}

/// Names appear in keys (`name:value`), headers and metrics.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}
