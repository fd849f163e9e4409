//! `RateLimitLayer` and its builder: the limits, where their keys come from, and what
//! happens on a denial, a missing key or a failing store. The layer holds the shared
//! state behind one `Arc`, so every service it makes — and every clone of those —
//! draws on the same limits.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use spillway_core::headers::HeaderStyle;
use spillway_core::{
    CoarseClock, DEFAULT_COOLDOWN, DEFAULT_FAILURES_TO_OPEN, Limit, Mode, OnStoreError, Sharing,
    Store,
};
use tower::Layer;

use crate::shared::{ActualFn, CostFn, OverrideFn, ShadowBanFn, Shared};
use crate::{KeyExtractor, RateLimit};

mod builder;

/// How long the layer waits for the store before the failure policy applies.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(20);

/// One limit the layer enforces: a name (for headers, keys and metrics), the limit, and
/// where each request's key for it comes from.
#[derive(Clone)]
pub struct Rule {
    pub(crate) name: Arc<str>,
    pub(crate) limit: Limit,
    pub(crate) key: KeyExtractor,
    pub(crate) cost: Option<CostFn>,
    pub(crate) sharing: Sharing,
    pub(crate) member: Option<KeyExtractor>,
    pub(crate) actual: Option<ActualFn>,
    /// A `shares` limit's priority: where a request names it, and the names, highest
    /// first.
    pub(crate) priority: Option<(KeyExtractor, Arc<[String]>)>,
    /// Limits set as data: the limit for a key's value, when one is set for it.
    pub(crate) overridden: Option<OverrideFn>,
}

impl Rule {
    /// A limit named `name` (1–64 of `A-Z a-z 0-9 - _ .`), keyed by `key`.
    pub fn new(name: &str, limit: Limit, key: KeyExtractor) -> Rule {
        Rule {
            name: name.into(),
            limit,
            key,
            cost: None,
            sharing: Sharing::Exact,
            member: None,
            actual: None,
            priority: None,
            overridden: None,
        }
    }

    /// What a `distinct` limit counts per key: its distinct values within the window
    /// (e.g. client IPs per `x-api-key`). Required by a `distinct` limit; for a
    /// `shares` limit, the request's child (its team, say; a value the tree does not
    /// list, or none, is `*`); refused by the others. A `distinct` request without it
    /// is refused like one without its key. A value longer than 1 KiB counts by its
    /// first 1 KiB.
    pub fn member(mut self, member: KeyExtractor) -> Rule {
        self.member = Some(member);
        self
    }

    /// A `shares` limit's priority: read by `from` (a header, say), one of `names`,
    /// highest first (as many as the limit's levels). A request naming none of them, or
    /// none at all, is the lowest: a client cannot promote itself by inventing one.
    pub fn priority(mut self, from: KeyExtractor, names: &[&str]) -> Rule {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        self.priority = Some((from, names.into()));
        self
    }

    /// Takes up to `units` from a remote store at once and admits locally from them
    /// ([`Sharing::Lease`]: never over the limit; under by at most `units` per server
    /// per window). `fixed_window` only; checked when the layer is built. No-op on a
    /// `MemoryStore`.
    pub fn lease(mut self, units: u64) -> Rule {
        self.sharing = Sharing::Lease { units };
        self
    }

    /// Counts locally and adds the hits to a remote store every `every`
    /// ([`Sharing::Sync`]: never under the limit; over by at most what the other
    /// servers admit in `2 × every`). `fixed_window` only; the layer must be built
    /// inside a Tokio runtime (a task flushes the counts). No-op on a `MemoryStore`.
    pub fn sync(mut self, every: Duration) -> Rule {
        self.sharing = Sharing::Sync { every };
        self
    }

    /// What a request costs against this limit (bytes for a bandwidth limit, say);
    /// overrides the layer's [`cost`](RateLimitLayerBuilder::cost). 0 only looks.
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Rule {
        self.cost = Some(Arc::new(cost));
        self
    }
}

impl Rule {
    /// Meters this limit: its cost ([`Rule::cost`], or the layer's) is an estimate
    /// reserved before the inner service is called (admitted only if it fits); once the
    /// inner service has answered, `actual` reads from the response's headers what the
    /// work really used (the tokens an LLM call used, say `x-tokens-used`), and the
    /// difference is settled before the response goes out: the unused estimate given
    /// back, the excess charged as usage, into debt past the limit (later requests are
    /// denied until it is paid back). `None` from `actual` keeps the estimate charged.
    /// A request the layer passed without charging it (shadow mode, a store failure
    /// under `open`) is charged what it used in full. `fixed_window`, `token_bucket`
    /// and `gcra` only (the others cannot give units back); checked when the layer is
    /// built. See docs/metering.md.
    pub fn metered(
        mut self,
        actual: impl Fn(&http::HeaderMap) -> Option<u64> + Send + Sync + 'static,
    ) -> Rule {
        self.actual = Some(Arc::new(actual));
        self
    }
}

impl Rule {
    /// Limits set as data: `limit_of` is asked for the key's value on every request
    /// and gives the limit set for that value, if one is (a tenant's own, set by an
    /// API call), used in place of this rule's for that request; `None` keeps this
    /// rule's. It should be a lookup in memory, not a store call: the service's
    /// overrides on a Redis the layer shares are read by `spillway_server`'s
    /// `limits::Follower` (docs/tower.md). Not with `concurrency`, `shares`, metered,
    /// lease or sync limits (their state outlives one request's limit); checked when
    /// the layer is built.
    pub fn overridden_by(
        mut self,
        limit_of: impl Fn(&str) -> Option<Limit> + Send + Sync + 'static,
    ) -> Rule {
        self.overridden = Some(Arc::new(limit_of));
        self
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("key", &self.key)
            .field("cost", &self.cost.as_ref().map(|_| "Fn"))
            .field("metered", &self.actual.is_some())
            .field("overridden", &self.overridden.is_some())
            .finish()
    }
}

/// What to do with a request whose key a limit cannot find.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MissingKey {
    /// Refuse it: HTTP 400 (gRPC `INVALID_ARGUMENT`) saying which key is missing.
    #[default]
    Reject,
    /// Count it under this key instead (every keyless request shares one limit).
    Fallback(String),
}

/// Configures a [`RateLimitLayer`]. Made by [`RateLimitLayer::builder`].
pub struct RateLimitLayerBuilder<St, C = CoarseClock> {
    store: St,
    clock: C,
    rules: Vec<Rule>,
    cost: Option<CostFn>,
    missing_key: MissingKey,
    mode: Mode,
    shadow_ban: Option<ShadowBanFn>,
    headers: HeaderStyle,
    headers_on_allowed: bool,
    on_store_error: OnStoreError,
    timeout: Duration,
    breaker: (u32, Duration),
    deny_cache: Option<usize>,
}

/// A tower [`Layer`] that rate limits the services it wraps.
///
/// Cloning the layer, and cloning the services it makes, shares one set of limits:
/// unlike tower's own `RateLimit`, ten clones still admit the limit once.
pub struct RateLimitLayer<St, C = CoarseClock> {
    shared: Arc<Shared<St, C>>,
}

// === impl RateLimitLayer ===

impl<St: Store> RateLimitLayer<St> {
    /// Starts configuring a layer over `store` (a `MemoryStore`, a `RedisStore`, …).
    pub fn builder(store: St) -> RateLimitLayerBuilder<St> {
        RateLimitLayerBuilder {
            store,
            clock: CoarseClock::new(),
            rules: Vec::new(),
            cost: None,
            missing_key: MissingKey::Reject,
            mode: Mode::Enforce,
            shadow_ban: None,
            headers: HeaderStyle::Ietf,
            headers_on_allowed: false,
            on_store_error: OnStoreError::Open,
            timeout: DEFAULT_TIMEOUT,
            breaker: (DEFAULT_FAILURES_TO_OPEN, DEFAULT_COOLDOWN),
            deny_cache: None,
        }
    }
}

impl<St, C> RateLimitLayer<St, C> {
    /// The store the layer decides on.
    pub fn store(&self) -> &St {
        self.shared.store.store()
    }
}

impl<St, C> Clone for RateLimitLayer<St, C> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, St, C> Layer<S> for RateLimitLayer<St, C> {
    type Service = RateLimit<S, St, C>;

    fn layer(&self, inner: S) -> RateLimit<S, St, C> {
        RateLimit::new(inner, Arc::clone(&self.shared))
    }
}

impl<St, C> fmt::Debug for RateLimitLayer<St, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("rules", &self.shared.rules)
            .finish_non_exhaustive()
    }
}
