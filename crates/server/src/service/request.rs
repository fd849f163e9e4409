//! The service's own request and response, free of wire types: gRPC, `/v1/check` and
//! `/json` all convert into these at the edge, and back out of them.

use std::sync::Arc;
use std::time::Duration;

use spillway_core::MAX_EXACT;
use spillway_core::headers::ceil_secs;
use spillway_policy::Unit;

use crate::config::{Callers, Overrides};

/// The most descriptors one request may carry. Envoy sends a handful; thousands are an
/// attack on the service's memory and the store's time.
pub const MAX_DESCRIPTORS: usize = 64;

/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 32;

/// The longest domain name, in bytes.
pub const MAX_DOMAIN_LEN: usize = 256;

/// The longest key of a descriptor entry, in bytes. Envoy's keys come from its
/// configuration (`descriptor_key`), not from clients; values, which do, have no bound
/// here (a long one is kept in keys as its digest).
pub const MAX_ENTRY_KEY_LEN: usize = 256;

/// Why no answer could be given.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The request is malformed: gRPC `INVALID_ARGUMENT`, HTTP 400. No store was called.
    #[error("{0}")]
    Invalid(String),
    /// The store failed and a rule's policy is `closed`: gRPC `UNAVAILABLE`, HTTP 503.
    #[error("{0}")]
    Unavailable(String),
}

/// What `ShouldRateLimit`, `/v1/check` and `/json` ask.
#[derive(Clone, Debug, Default)]
pub struct CheckRequest {
    /// Selects the policy file.
    pub domain: String,
    /// Each one is matched and decided; one status per descriptor comes back, in order.
    pub descriptors: Vec<Descriptor>,
    /// Hits to add to every matched limit unless a descriptor says otherwise.
    pub hits: u64,
    /// The hits are usage reported after the fact (what a response cost): charged in
    /// full to every matched limit, into debt past it (`/v1/check`'s `usage: true`).
    pub usage: bool,
    /// The hits are a reservation's estimate (`/v1/reserve`): checked like any request
    /// even by a metered rule, which otherwise takes hits as usage.
    pub reserve: bool,
    /// With `usage`: the hits are given back, not charged: what a reservation made at
    /// this time took and did not use (`/v1/commit`).
    pub refund: Option<spillway_core::Timestamp>,
    /// A reservation's settle (`/v1/commit`), on the rules in force now: a rule
    /// changed since to one that cannot give back or take usage keeps what the
    /// estimate took, and takes nothing more.
    pub settle: bool,
    /// Every descriptor gives back the hold it names (`/v1/release`): its concurrency
    /// rules' holds, by the descriptor's last value; nothing else is counted.
    pub release: bool,
    /// Every descriptor renews the hold it names (`/v1/renew`): its concurrency rules'
    /// holds, by the descriptor's last value, start their lease again (one lapsed is
    /// taken again if it fits); nothing else is counted.
    pub renew: bool,
    /// Its place in the queues of the `concurrency` rules with a `max_wait` it takes
    /// from, made by the service (never read from a client): plain for a caller that
    /// cannot wait (`/v1/check` without `"wait": true`).
    pub ticket: spillway_core::Ticket,
}

/// One descriptor: the path in the policy tree.
#[derive(Clone, Debug, Default)]
pub struct Descriptor {
    /// `(key, value)` pairs, in order.
    pub entries: Vec<(String, String)>,
    /// Overrides the request's hits; `Some(0)` looks without consuming.
    pub hits: Option<u64>,
    /// Envoy's per-descriptor limit override: used instead of the configuration.
    pub limit: Option<Override>,
}

/// A limit given in the request itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Override {
    /// Requests per unit; 0 blocks everything.
    pub requests_per_unit: u64,
    /// The window.
    pub unit: Unit,
}

/// The reference's response codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// Within the limit (or no limit applies).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// What the service answers.
#[derive(Clone, Debug)]
pub struct CheckResponse {
    /// `OverLimit` when an enforcing rule denied (and global shadow mode is off).
    pub overall: Code,
    /// One per request descriptor, in order.
    pub statuses: Vec<Status>,
    /// With `RESPONSE_DYNAMIC_METADATA`: the `metadata` of the rules of the descriptors
    /// not over their limit, merged (the wire edge adds the request's own part).
    pub metadata: Option<spillway_policy::Metadata>,
    /// Admitted after a wait (a rule's `max_wait`): how long the request must wait
    /// before it goes ahead, the longest of its rules'. Zero when it need not wait, or
    /// when it is over the limit.
    pub wait: Duration,
    /// Over the limit with a place kept in a `concurrency` rule's queue: how long it
    /// may wait there (the shortest such rule's `max_wait`). `None` otherwise.
    pub queued: Option<Duration>,
    /// With `queued`: every enforcing rule over its limit keeps it a place, so waiting
    /// may admit it (another that denied it outright would deny it again).
    pub waitable: bool,
}

/// One descriptor's answer.
#[derive(Clone, Debug)]
pub struct Status {
    /// OK, or over the limit (a shadow rule over its limit reports OK).
    pub code: Code,
    /// The rule reported for this descriptor: the one that denied, or the one closest to
    /// its limit. `None` when no rule applies (no match, replaced, unlimited).
    pub rule: Option<ReportedRule>,
    /// Units left under the reported rule (`u32::MAX` for an unlimited rule).
    pub remaining: u64,
    /// Until the reported rule's state is back to no state.
    pub reset_after: Duration,
    /// When denied: how long until the same request would be admitted; `None` when
    /// allowed, or when the cost can never fit.
    pub retry_after: Option<Duration>,
    /// A shadow rule was over its limit (the code says OK).
    pub shadow_denied: bool,
    /// The store failed and the rule's failure policy decided (`open` or `local`).
    pub degraded: bool,
    /// Admitted after a wait: the longest of the descriptor's enforcing rules' waits
    /// (their `max_wait`); zero otherwise.
    pub wait: Duration,
}

/// The parts of a rule a response reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedRule {
    /// `name` from the configuration; `None` for unnamed rules and overrides.
    pub name: Option<Arc<str>>,
    /// The config path (for rules without a name, and for metrics).
    pub path: Arc<str>,
    /// Units per window.
    pub requests_per_unit: u64,
    /// The most units the rule admits at once, the most `remaining` can be: its burst
    /// for `token_bucket` and `gcra`, else its limit.
    pub capacity: u64,
    /// The window as a reference unit, when it is one.
    pub unit: Option<Unit>,
    /// The window.
    pub window: Duration,
    /// `fixed_window`, `gcra`, ...
    pub algorithm: &'static str,
    /// The rule is in shadow mode.
    pub shadow: bool,
}

impl CheckResponse {
    /// Its wait refused (the service held `max_waiters` answers already): over the
    /// limit, each waiting descriptor told to retry after its wait. Its slots were
    /// reserved and lapse unused.
    pub fn refuse_wait(&mut self) {
        for s in self.statuses.iter_mut().filter(|s| !s.wait.is_zero()) {
            s.code = Code::OverLimit;
            s.retry_after = Some(s.wait);
            s.wait = Duration::ZERO;
        }
        self.overall = Code::OverLimit;
        self.wait = Duration::ZERO;
    }

    /// Whether it waits in a queue for a release: over the limit only where a
    /// `concurrency` rule keeps its place.
    pub fn may_wait_in_queue(&self) -> bool {
        self.queued.is_some() && self.waitable
    }
}

impl Status {
    /// No rule applies (no match, replaced, unknown domain): OK, nothing counted.
    pub(crate) fn no_rule() -> Status {
        Status {
            code: Code::Ok,
            rule: None,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: None,
            shadow_denied: false,
            degraded: false,
            wait: Duration::ZERO,
        }
    }

    /// `duration_until_reset` as the reference reports it: whole seconds, rounded up.
    pub fn reset_seconds(&self) -> u64 {
        ceil_secs(self.reset_after)
    }
}

/// A duration in whole milliseconds, rounded up: retrying after it never comes early.
pub fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// A [`CheckRequest`] within the service's bounds: what the service decides, and all
/// it decides. Made once, where a request enters ([`CheckRequest::validate`], or
/// [`CheckRequest::admit`] on a listener), and read-only after: nothing past that
/// point checks a request again, or can hold one that fails the checks.
#[derive(Clone, Debug)]
pub struct Valid(CheckRequest);

impl std::ops::Deref for Valid {
    type Target = CheckRequest;

    fn deref(&self) -> &CheckRequest {
        &self.0
    }
}

impl Valid {
    /// The same request bringing its ticket as one of `kind` (its last try in a queue).
    pub(crate) fn ticket_doing(&self, kind: spillway_core::TicketKind) -> Valid {
        Valid(CheckRequest {
            ticket: self.0.ticket.doing(kind),
            ..self.0.clone()
        })
    }

    /// The same request as a reservation's estimate (`/v1/reserve`): checked like any
    /// request even by a metered rule.
    pub(crate) fn reserving(&self) -> Valid {
        Valid(CheckRequest {
            reserve: true,
            ..self.0.clone()
        })
    }
}

impl CheckRequest {
    /// Holds the request to what its listener's callers may ask ([`Callers`]:
    /// overrides used, dropped or refused, each descriptor's hits at most `max_hits`),
    /// then to the service's bounds ([`CheckRequest::validate`]).
    pub fn admit(mut self, callers: Callers) -> Result<Valid, CheckError> {
        self.bound_by(callers)?;
        self.validate()
    }

    /// Refuses what no store should see, before anything is looked up: the service's
    /// bounds (a domain, 1 to [`MAX_DESCRIPTORS`] descriptors, …).
    pub fn validate(self) -> Result<Valid, CheckError> {
        self.within_bounds()?;
        Ok(Valid(self))
    }

    fn within_bounds(&self) -> Result<(), CheckError> {
        let req = self;
        let invalid = |m: String| Err(CheckError::Invalid(m));
        if req.domain.is_empty() {
            return invalid("rate limit domain must not be empty".into());
        }
        if req.domain.len() > MAX_DOMAIN_LEN {
            return invalid(format!(
                "domain is {} bytes, the most is {MAX_DOMAIN_LEN}",
                req.domain.len()
            ));
        }
        if req.descriptors.is_empty() {
            return invalid("rate limit descriptor list must not be empty".into());
        }
        if req.descriptors.len() > MAX_DESCRIPTORS {
            return invalid(format!(
                "{} descriptors in one request, the most is {MAX_DESCRIPTORS}",
                req.descriptors.len()
            ));
        }
        if req.hits > MAX_EXACT {
            return invalid(format!("hits {} is larger than 2^53", req.hits));
        }
        for (i, d) in req.descriptors.iter().enumerate() {
            if d.entries.is_empty() {
                return invalid(format!("descriptor {i} has no entries"));
            }
            if d.entries.len() > MAX_ENTRIES {
                return invalid(format!(
                    "descriptor {i} has {} entries, the most is {MAX_ENTRIES}",
                    d.entries.len()
                ));
            }
            // The one check of a cost in the service (the store's script checks again).
            if let Some(hits) = d.hits.filter(|&h| h > MAX_EXACT) {
                return invalid(format!("descriptor {i}: hits {hits} is larger than 2^53"));
            }
            if let Some(j) = d.entries.iter().position(|(k, _)| k.is_empty()) {
                return invalid(format!("descriptor {i} entry {j} has an empty key"));
            }
            if let Some((j, (k, _))) = d
                .entries
                .iter()
                .enumerate()
                .find(|(_, (k, _))| k.len() > MAX_ENTRY_KEY_LEN)
            {
                return invalid(format!(
                    "descriptor {i} entry {j}: key of {} bytes, the most is {MAX_ENTRY_KEY_LEN}",
                    k.len()
                ));
            }
            // A value of any length is decided on: a long one is kept in keys as
            // its digest (`spillway_policy::value_into`). Refusing it would fail the
            // call, which Envoy under `failure_mode_deny: false` turns into "admit".
        }
        Ok(())
    }

    /// Holds the request to what its listener's callers may ask: overrides used,
    /// dropped or refused, and each descriptor's hits at most `max_hits`.
    fn bound_by(&mut self, callers: Callers) -> Result<(), CheckError> {
        let invalid = |m: String| Err(CheckError::Invalid(m));
        for (i, d) in self.descriptors.iter_mut().enumerate() {
            if d.limit.is_some() {
                match callers.overrides {
                    Overrides::Allow => {}
                    Overrides::Ignore => d.limit = None,
                    Overrides::Refuse => {
                        return invalid(format!(
                            "descriptor {i}: this listener takes no limit in the request \
                             (its limit_overrides setting is refuse)"
                        ));
                    }
                }
            }
            let hits = d.hits.unwrap_or(self.hits);
            if let Some(max) = callers.max_hits.filter(|&max| hits > max) {
                return invalid(format!(
                    "descriptor {i}: hits {hits} is over this listener's max_hits, {max}"
                ));
            }
        }
        Ok(())
    }
}
