//! A validated rule: what one matched descriptor is limited by, and how.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;
use spillway_core::{Algorithm, Limit, Mode, OnStoreError, Rejected, Sharing};

use crate::Unit;

mod priorities;

pub use priorities::Priorities;

/// What a rule does with a hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleLimit {
    /// Count against a limit.
    Limited(Limit),
    /// The reference's `unlimited: true`: always OK, never counted, no store call.
    Unlimited,
    /// The reference's `requests_per_unit: 0`: always over the limit, no store call.
    BlockAll,
}

/// One limit a descriptor is checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// `rate_limit.name` or the native limit's `name`: reported as `current_limit.name`,
    /// and what `replaces` refers to.
    pub name: Option<Arc<str>>,
    /// What the rule counts.
    pub limit: RuleLimit,
    /// `requests_per_unit` as reported to Envoy.
    pub requests_per_unit: u64,
    /// The window as a reference unit, when it is one (reported in `current_limit`).
    pub unit: Option<Unit>,
    /// `enforce`, or `shadow` (also the reference's `shadow_mode: true`).
    pub mode: Mode,
    /// The reference's `quota_mode`: denies only when every quota rule of the request does.
    pub quota_mode: bool,
    /// `None` = the service's default.
    pub on_store_error: Option<OnStoreError>,
    /// Names of other rules this one drops from a request where both match.
    pub replaces: Vec<Arc<str>>,
    /// How the servers share the limit through the store: exact, a lease or sync
    /// (native limits' `lease` and `sync`; checked against the limit when loaded).
    pub sharing: Sharing,
    /// Reference semantics: `remaining` is 0 whenever over the limit.
    pub reference: bool,
    /// A metered budget (native limits' `metered: true`): a request's hits above 0 are
    /// usage reported after the fact (Envoy's stream-done call), charged in full, into
    /// debt; a check looks with hits 0 and is admitted while nothing is owed.
    pub metered: bool,
    /// Told apart from the node's other limits in the counter key (native limits only):
    /// the name, or the position. Empty for a reference rule (one per node).
    pub slot: Arc<str>,
    /// The config path for metrics: levels joined by `.`, each `key` or `key_value` as
    /// written (wildcards keep `*`); bounded by the configuration, never per request.
    pub metric: Arc<str>,
    /// Its descriptor's `metadata`, returned while the rule passes (the reference's
    /// `RESPONSE_DYNAMIC_METADATA`).
    pub metadata: Option<Arc<Metadata>>,
    /// The service's counters of the rule's decisions, kept with the rule while it is
    /// loaded.
    pub counters: Counters,
    /// A `shares` rule's priorities, when its requests name one.
    pub priorities: Option<Arc<Priorities>>,
}

/// A rule's metric handles, each registered with the recorder on its first use (by then
/// the service has installed it) and kept with the rule: a decision then counts with an
/// atomic add, where looking a counter up by its labels cost about 220 ns. Not part of
/// what the rule says: a clone starts without them, and every two are equal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Admitted.
    pub ok: Handle,
    /// Refused.
    pub over_limit: Handle,
    /// Admitted by a rule in shadow mode that would have refused it.
    pub shadow_over_limit: Handle,
    /// Admitted past the service's near-limit ratio.
    pub near_limit: Handle,
    /// Holds of a `concurrency` rule given back (releases, not decisions).
    pub released: Handle,
    /// Holds of a `concurrency` rule found lapsed: never given back.
    pub lapsed: Handle,
    /// Holds of a `concurrency` rule in use, per key.
    pub in_use: InUse,
    /// The reference's `total_hits`, in hits (kept only when the service keeps the
    /// reference's stats; so are the four below).
    pub total_hits: Handle,
    /// The reference's `over_limit`, in hits.
    pub hits_over_limit: Handle,
    /// The reference's `near_limit`, in hits.
    pub hits_near_limit: Handle,
    /// The reference's `within_limit`, in hits.
    pub within_limit: Handle,
    /// The reference's `shadow_mode`, in hits.
    pub shadow_mode: Handle,
}

/// One counter of a rule, registered on first use.
#[derive(Default)]
pub struct Handle(OnceLock<metrics::Counter>);

impl Handle {
    /// The counter, registered by `register` the first time.
    pub fn get_or_register(
        &self,
        register: impl FnOnce() -> metrics::Counter,
    ) -> &metrics::Counter {
        self.0.get_or_init(register)
    }
}

impl Clone for Handle {
    fn clone(&self) -> Handle {
        Handle::default()
    }
}

impl PartialEq for Handle {
    fn eq(&self, _: &Handle) -> bool {
        true
    }
}

impl Eq for Handle {}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Handle")
    }
}

/// A `concurrency` rule's holds in use on each key this service decided on, as the
/// store said at its latest decision there: the holds, and when the last of them lapses
/// (µs). At most [`InUse::MAX_KEYS`] keys are followed. Like a [`Handle`], not part
/// of what the rule says.
#[derive(Default)]
pub struct InUse(std::sync::Mutex<std::collections::HashMap<Box<str>, (u64, u64)>>);

impl InUse {
    /// The most keys followed per rule: a key past them is left out of the total (a
    /// few megabytes at most, whatever the traffic).
    pub const MAX_KEYS: usize = 100_000;

    /// The store said `key` has `holds` in use, the last lapsing at `until` (µs).
    pub fn note(&self, key: &str, holds: u64, until: u64) {
        let mut keys = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let full = keys.len() >= Self::MAX_KEYS;
        match keys.get_mut(key) {
            Some(_) if holds == 0 => {
                keys.remove(key);
            }
            Some(at) => *at = (holds, until),
            None if holds == 0 || full => {}
            None => {
                keys.insert(key.into(), (holds, until));
            }
        }
    }

    /// The holds in use at `now` on the keys followed, forgetting those whose holds
    /// have all lapsed.
    pub fn total(&self, now: u64) -> u64 {
        let mut keys = self.0.lock().unwrap_or_else(|e| e.into_inner());
        keys.retain(|_, (_, until)| *until > now);
        keys.values().map(|(holds, _)| holds).sum()
    }
}

impl Clone for InUse {
    fn clone(&self) -> InUse {
        InUse::default()
    }
}

impl PartialEq for InUse {
    fn eq(&self, _: &InUse) -> bool {
        true
    }
}

impl Eq for InUse {}

impl fmt::Debug for InUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InUse")
    }
}

/// A descriptor's `metadata` map, as written.
pub type Metadata = serde_json::Map<String, serde_json::Value>;

impl Rule {
    /// Whether the rule is a `distinct` limit: it counts the distinct values of its
    /// node's own entry (the request's member) per the entries before it.
    pub fn counts_members(&self) -> bool {
        matches!(&self.limit, RuleLimit::Limited(l) if l.algorithm().counts_members())
    }

    /// Whether the rule is a `concurrency` limit: it holds slots under its node's own
    /// entry (the request's id) per the entries before it.
    pub fn holds(&self) -> bool {
        matches!(&self.limit, RuleLimit::Limited(l) if l.algorithm().holds())
    }

    /// Whether the rule is a `shares` limit: its node's own entry names the request's
    /// child, under the entries before it.
    pub fn shares(&self) -> bool {
        matches!(&self.limit, RuleLimit::Limited(l) if l.algorithm().shares())
    }

    /// Whether the rule reads its node's own entry as the request's member: what a
    /// `distinct` rule counts, the id of a `concurrency` rule's hold, a `shares`
    /// rule's child.
    pub fn takes_member(&self) -> bool {
        self.counts_members() || self.holds() || self.shares()
    }

    /// What a `shares` member (as [`share_member`](Rule::share_member) makes it) names:
    /// its child, and its priority's name (`None` when the rule has no priorities).
    pub fn share_of_member<'m>(&self, member: &'m str) -> (&'m str, Option<&str>) {
        let child = member.get(1..).unwrap_or("");
        let priority = self.priorities.as_ref().and_then(|p| {
            let level: usize = member.get(..1)?.parse().ok()?;
            p.names.get(level).map(String::as_str)
        });
        (child, priority)
    }

    /// A `shares` rule's member for a request naming the child `child` (a value the
    /// rule does not list is `*`) at the priority `priority` names (see
    /// [`Priorities::level`]). Empty for other rules.
    pub fn share_member(&self, child: &str, priority: Option<&str>) -> Vec<u8> {
        let RuleLimit::Limited(limit) = &self.limit else {
            return Vec::new();
        };
        let level = self.priorities.as_ref().map_or(0, |p| p.level(priority));
        limit.share_member(child, level)
    }

    /// A reference rule: a fixed window of `unit` aligned to the epoch, hits counted even
    /// when over the limit. `requests_per_unit` 0 blocks everything.
    pub fn reference(requests_per_unit: u64, unit: Unit) -> Rule {
        let limit = match requests_per_unit {
            0 => RuleLimit::BlockAll,
            n => match Limit::builder(Algorithm::FixedWindow, n, unit.duration())
                .count_rejected(true)
                .build()
            {
                Ok(limit) => RuleLimit::Limited(limit),
                // n ≤ 2^64 requests per ≥ 1 s only fails above 2^53, which a u32
                // (the protocol's type) never reaches; refuse everything rather than panic.
                Err(_) => RuleLimit::BlockAll,
            },
        };
        Rule {
            name: None,
            limit,
            requests_per_unit,
            unit: Some(unit),
            mode: Mode::Enforce,
            quota_mode: false,
            on_store_error: None,
            replaces: Vec::new(),
            sharing: Sharing::Exact,
            reference: true,
            metered: false,
            slot: Arc::from(""),
            metric: Arc::from(""),
            metadata: None,
            counters: Counters::default(),
            priorities: None,
        }
    }

    /// The rule charged only for the requests it denies itself, if it is a reference
    /// rule: a request another rule denies does not consume it (the reference's
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`). Other rules come back unchanged.
    pub fn charging_own_rejections(mut self) -> Rule {
        if let (true, RuleLimit::Limited(l)) = (self.reference, &self.limit) {
            self.limit = RuleLimit::Limited(l.with_rejected(Rejected::ChargedWhenOwn));
        }
        self
    }

    /// The window the rule counts over, if it counts.
    pub fn window(&self) -> Option<Duration> {
        match &self.limit {
            RuleLimit::Limited(l) => Some(l.window()),
            RuleLimit::Unlimited => None,
            RuleLimit::BlockAll => self.unit.map(Unit::duration),
        }
    }

    /// The name reported to clients: the rule's name, or its config path.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.metric)
    }

    /// The rule as `spillway validate --json` and `/v1/config` report it.
    pub fn summary(&self) -> RuleSummary<'_> {
        let limited = match &self.limit {
            RuleLimit::Limited(l) => Some(l),
            _ => None,
        };
        RuleSummary {
            path: &self.metric,
            slot: &self.slot,
            name: self.name.as_deref(),
            kind: match self.limit {
                RuleLimit::Limited(_) => "limited",
                RuleLimit::Unlimited => "unlimited",
                RuleLimit::BlockAll => "block_all",
            },
            algorithm: limited.map(|l| l.algorithm().name()),
            limit: limited.map(Limit::limit),
            window_ms: limited.map(|l| l.window().as_millis() as u64),
            burst: limited.map(Limit::burst),
            max_wait_ms: limited
                .map(|l| l.max_wait().as_millis() as u64)
                .filter(|&ms| ms > 0),
            mode: self.mode.name(),
            quota_mode: self.quota_mode,
            reference: self.reference,
            on_store_error: self.on_store_error.map(OnStoreError::name),
            sharing: self.sharing.to_string(),
            bound: self.sharing.bound(),
            description: self.to_string(),
        }
    }
}

/// A rule's settings, flat, for JSON.
#[derive(Debug, Serialize)]
pub struct RuleSummary<'a> {
    /// The config path (also the `rule` label of its metrics).
    pub path: &'a str,
    /// Which of its node's limits, as the counter key (and the metrics' `limit` label)
    /// has it: `#name`, `#position`, or empty for a reference rule.
    pub slot: &'a str,
    pub name: Option<&'a str>,
    /// `limited`, `unlimited` or `block_all`.
    pub kind: &'static str,
    pub algorithm: Option<&'static str>,
    pub limit: Option<u64>,
    pub window_ms: Option<u64>,
    pub burst: Option<u64>,
    /// How long a request may wait for its turn (`max_wait`), when it may.
    pub max_wait_ms: Option<u64>,
    /// `enforce` or `shadow`.
    pub mode: &'static str,
    pub quota_mode: bool,
    pub reference: bool,
    /// `None`: the service's default.
    pub on_store_error: Option<&'static str>,
    pub sharing: String,
    pub bound: String,
    /// The rule on one line, as [`Display`](fmt::Display) writes it.
    pub description: String,
}

/// `burst: gcra 10 per 1s, burst 20 [shadow] [on_store_error: local]`.
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.name {
            write!(f, "{name}: ")?;
        }
        match &self.limit {
            RuleLimit::Limited(l) => write!(f, "{l}")?,
            RuleLimit::Unlimited => f.write_str("unlimited")?,
            RuleLimit::BlockAll => f.write_str("blocks everything (requests_per_unit: 0)")?,
        }
        if let Some(p) = &self.priorities {
            write!(f, " by {}: {}", p.key, p.names.join(" > "))?;
        }
        if self.reference {
            f.write_str(" (reference semantics)")?;
        }
        if self.mode == Mode::Shadow {
            f.write_str(" [shadow]")?;
        }
        if self.quota_mode {
            f.write_str(" [quota]")?;
        }
        if self.metered {
            f.write_str(" [metered]")?;
        }
        if let Some(policy) = self.on_store_error {
            write!(f, " [on_store_error: {}]", policy.name())?;
        }
        if !self.replaces.is_empty() {
            let names: Vec<&str> = self.replaces.iter().map(|n| &**n).collect();
            write!(f, " [replaces {}]", names.join(", "))?;
        }
        if self.sharing.is_shared() {
            write!(f, " [{}: {}]", self.sharing, self.sharing.bound())?;
        }
        Ok(())
    }
}
