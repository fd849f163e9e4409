//! The service, free of transports: a [`CheckRequest`] is matched against the live
//! policies, decided on the store in one round, and aggregated into a [`CheckResponse`]
//! with the reference's semantics.
//!
//! Rules whose denial must not stop the others from being charged (shadow rules, and
//! the reference's quota-mode rules) are decided in a second round of their own, at the
//! same time as the first: an enforcing batch is all-or-nothing, and a shadow rule that
//! would deny must not change what the enforcing rules count.

use std::borrow::Cow;
use std::sync::Arc;

use arc_swap::ArcSwap;
use spillway_core::{Clock, Decision, Key, Timestamp};
use spillway_policy::{OnStoreError, PolicySet, Rule, RuleLimit, override_key};

mod answer;
pub(crate) mod candidate;
mod decide;
mod explain;
mod matched;
pub(crate) mod overrides;
pub(crate) mod request;
pub(crate) mod reserve;
mod status;

use crate::metrics;
use crate::stats::Stats;
use crate::store::Stores;
use crate::top::{RuleTop, TopKeys};
pub use explain::{
    DeniedBy, DescriptorExplanation, Explanation, LimitExplanation, LimitState, PathStep,
};
pub(crate) use matched::RELEASE_ENTRY;
use overrides::Rules;
pub use request::CheckError;
use request::{CheckResponse, Code, Status, Valid};

/// Service-wide switches (the reference's `SHADOW_MODE`, `QUOTA_MODE`, `NEAR_LIMIT_RATIO`).
#[derive(Clone, Debug)]
pub struct Options {
    /// Never answer OVER_LIMIT overall (statuses still say which descriptor is over).
    pub global_shadow: bool,
    /// Treat every rule as quota-mode.
    pub global_quota: bool,
    /// What a rule without `on_store_error` does when the store fails.
    pub on_store_error: OnStoreError,
    /// A rule past this fraction of its limit counts as near the limit in metrics.
    pub near_limit_ratio: f64,
    /// Before every counter key (`CACHE_KEY_PREFIX`).
    pub key_prefix: String,
    /// A reference rule is charged only for the requests it denies itself
    /// (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
    pub stop_increment_when_over_limit: bool,
    /// Answers carry the passing rules' `metadata` (`RESPONSE_DYNAMIC_METADATA`).
    pub dynamic_metadata: bool,
    /// The most store work one request may ask for ([`spillway_core::work`]); more is
    /// refused before any store call. Redis runs one script at a time, so one request's
    /// script is what every other caller may wait behind. Its default, 256 decisions of
    /// a fixed window, is some milliseconds of Redis on a small machine (16 descriptors
    /// on a sliding window of precision 1,000; one of precision 10,000 fits, 157); 64
    /// descriptors of precision 10,000 (10,048) held Redis long enough to time out every
    /// other caller.
    pub max_request_work: u64,
}

impl Options {
    /// `policies` as this service counts them: under its key prefix, and with the
    /// reference rules charged as the options say.
    pub(crate) fn prepare(&self, policies: PolicySet) -> PolicySet {
        let policies = policies.with_key_prefix(&self.key_prefix);
        if self.stop_increment_when_over_limit {
            policies.charging_own_rejections()
        } else {
            policies
        }
    }

    /// The options `config` sets (its `service` settings, and the store's failure
    /// policy and key prefix).
    pub fn of(config: &crate::config::Config) -> Options {
        let s = &config.service;
        Options {
            global_shadow: s.shadow_mode,
            global_quota: s.quota_mode,
            on_store_error: config.store.on_error,
            near_limit_ratio: s.near_limit_ratio,
            key_prefix: config.store.key_prefix.clone(),
            stop_increment_when_over_limit: s.stop_increment_when_over_limit,
            dynamic_metadata: s.dynamic_metadata,
            max_request_work: s.max_request_work,
        }
    }
}

impl Default for Options {
    /// Every setting at its default (the configuration's own: written once, in its table).
    fn default() -> Options {
        Options::of(&crate::config::Config::default())
    }
}

/// The transport-agnostic rate limit service.
pub struct Service {
    policies: ArcSwap<PolicySet>,
    stores: Stores,
    clock: Arc<dyn Clock>,
    options: Options,
    override_path: Arc<str>,
    /// The heaviest denied keys per rule (`GET /v1/top`).
    top: TopKeys,
    /// Policies decided in shadow beside these (`--candidate-config`).
    candidate: Option<candidate::Candidate>,
    /// The reference's stats (off unless asked for).
    stats: Arc<Stats>,
    /// The store of the rules whose window is one second, when they have one of their
    /// own (`per_second_store`).
    per_second: Option<Stores>,
    /// Woken at every hold this replica gives back: a take waiting in a queue here
    /// tries again at once (one given back on another replica is seen at its next poll).
    released: tokio::sync::Notify,
    /// Limits set as data for exact paths, before the files' (`overrides.rs`).
    overrides: overrides::Overrides,
    /// Where budget alerts go (`alerts.rs`).
    alerts: crate::alerts::Alerts,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("store", &self.stores.store().kind())
            .finish_non_exhaustive()
    }
}

/// One matched rule of one descriptor.
struct Hit<'a> {
    descriptor: usize,
    rule: Cow<'a, Rule>,
    /// Present for rules that count.
    key: Option<Key>,
    cost: u64,
    /// Whether `cost` is usage reported after the fact, charged in full (a metered
    /// rule's hits above 0, or a request that says `usage`).
    usage: bool,
    /// With `usage`: given back, not charged (a reservation's unused estimate).
    refund: Option<Timestamp>,
    /// What a `distinct` rule counts: the descriptor's last value.
    member: Option<String>,
}

/// One rule's decision.
struct Decided {
    /// The hit it decides.
    hit: usize,
    decision: Decision,
    /// A failure policy made it, not the store.
    degraded: bool,
    /// A `concurrency` rule's holds its round found lapsed and cleared.
    lapsed: u64,
    /// Budget alerts its charge reached first in the window: from, to (indexes into
    /// the limit's `alert_at`), and the use after it.
    reached: Option<(u8, u8, u64)>,
}

/// How the store took part in a check.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Some decision was a failure policy's, not the store's.
    pub(crate) degraded: bool,
    /// The store that kept the record the check carried (`main`, `per_second`), and
    /// its handle there, when one kept it.
    pub(crate) kept: Option<(&'static str, String)>,
}

/// A record to keep with a check's charge (a reservation's): it rides the first store
/// round that decides some of the check's limits, in that round's one store call.
pub(crate) struct Carried<'a> {
    keep: spillway_core::Keep<'a>,
    taken: std::sync::atomic::AtomicBool,
    kept: parking_lot::Mutex<Option<(&'static str, String)>>,
}

impl<'a> Carried<'a> {
    pub(crate) fn new(keep: spillway_core::Keep<'a>) -> Carried<'a> {
        Carried {
            keep,
            taken: Default::default(),
            kept: Default::default(),
        }
    }

    /// The record, for the one round that claims it.
    fn claim(&self) -> Option<spillway_core::Keep<'a>> {
        use std::sync::atomic::Ordering;
        (!self.taken.swap(true, Ordering::Relaxed)).then_some(self.keep)
    }

    fn handle(&self) -> Option<(&'static str, String)> {
        self.kept.lock().take()
    }
}

/// One check between its stages: what matched (`Service::matched`), then decided in
/// its rounds (`Service::decide`), then answered (`Service::aggregate`).
struct Check<'p> {
    hits: Vec<Hit<'p>>,
    /// The counted hits decided all-or-nothing, in one round.
    together: Vec<usize>,
    /// The counted hits whose denial must not stop the others' charge (shadow and
    /// quota-mode rules): a round of their own, at the same time.
    alone: Vec<usize>,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` over reference rules only.
    one_round: bool,
    now: Timestamp,
}

impl Service {
    pub fn new(
        policies: PolicySet,
        stores: Stores,
        clock: Arc<dyn Clock>,
        options: Options,
    ) -> Service {
        Service {
            policies: ArcSwap::from_pointee(options.prepare(policies)),
            stores,
            clock,
            options,
            override_path: Arc::from("override"),
            top: TopKeys::default(),
            candidate: None,
            stats: Arc::default(),
            per_second: None,
            released: tokio::sync::Notify::new(),
            overrides: overrides::Overrides::default(),
            alerts: crate::alerts::Alerts::default(),
        }
    }

    /// Budget alerts sent by `alerts` (by default they are counted, not sent).
    pub fn with_alerts(mut self, alerts: crate::alerts::Alerts) -> Service {
        self.alerts = alerts;
        self
    }

    /// Applies overrides' changes (the registry's, `limits.rs`), in order, as one
    /// swap: refused whole when an override's limits do not compile.
    pub(crate) fn apply_overrides(
        &self,
        changes: &[overrides::Set<'_>],
        replace: bool,
    ) -> Result<(), Vec<spillway_policy::overrides::OverrideError>> {
        self.overrides
            .apply(changes, replace, |set| self.options.prepare(set))?;
        self.forget_denials();
        Ok(())
    }

    /// The limit named `name` that the override of exactly `entries` in `domain` sets
    /// (its only limit, whatever its name, when it has one); `None` when the path has
    /// no override. What a tower layer asks, through `limits::Follower`.
    pub fn override_limit<K: AsRef<str>, V: AsRef<str>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
        name: &str,
    ) -> Option<spillway_core::Limit> {
        self.overrides.limit(domain, entries, name)
    }

    /// Sets `domain`'s override of exactly `entries` to `limits` (the policy's native
    /// form, as JSON) in this service alone: for a program that embeds the service and
    /// keeps its overrides itself (the admin API's registry keeps, shares and audits
    /// them). Refused, naming the fields at fault, as the admin API refuses it.
    pub fn set_override(
        &self,
        domain: &str,
        entries: &[(String, String)],
        limits: &serde_json::Value,
    ) -> Result<(), Vec<spillway_policy::overrides::OverrideError>> {
        self.set_overrides(domain, &[(entries.to_vec(), limits.clone())])
    }

    /// [`Service::set_override`] for many paths at once, as one change (a change
    /// copies a 256th of the domain's overrides: many at once copy it once).
    pub fn set_overrides(
        &self,
        domain: &str,
        overrides: &[(Vec<(String, String)>, serde_json::Value)],
    ) -> Result<(), Vec<spillway_policy::overrides::OverrideError>> {
        let at_ms = self.now().as_micros() / 1000;
        let texts: Vec<String> = overrides.iter().map(|(_, l)| l.to_string()).collect();
        let sets: Vec<overrides::Set<'_>> = overrides
            .iter()
            .zip(&texts)
            .map(|((entries, _), limits)| overrides::Set {
                domain,
                entries,
                limits: Some(limits),
                version: 0,
                by: "in process",
                at_ms,
            })
            .collect();
        self.apply_overrides(&sets, false)
    }

    /// Every override now.
    pub(crate) fn overrides(&self) -> std::sync::Arc<overrides::Index> {
        self.overrides.snapshot()
    }

    /// Woken at every hold this replica gives back (see `Service::released`).
    pub(crate) fn released(&self) -> &tokio::sync::Notify {
        &self.released
    }

    /// Decides the rules whose window is one second on `stores` (`per_second_store`).
    pub fn with_per_second(mut self, stores: Stores) -> Service {
        self.per_second = Some(stores);
        self
    }

    /// The per-second store, when there is one.
    pub fn per_second(&self) -> Option<&Stores> {
        self.per_second.as_ref()
    }

    /// Every store: the main one, and the per-second one if any, each with its name
    /// in metrics (`main`, `per_second`).
    pub fn every_store(&self) -> impl Iterator<Item = (&'static str, &Stores)> {
        std::iter::once(("main", &self.stores))
            .chain(self.per_second.as_ref().map(|s| ("per_second", s)))
    }

    /// The store `rule` decides on: the per-second one for a rule whose window is one
    /// second, when there is one.
    pub(crate) fn stores_for(&self, rule: &Rule) -> (&'static str, &Stores) {
        match &self.per_second {
            Some(s) if rule.window() == Some(std::time::Duration::from_secs(1)) => {
                ("per_second", s)
            }
            _ => ("main", &self.stores),
        }
    }

    /// Keeps the reference's stats in `stats`.
    pub fn with_stats(mut self, stats: Arc<Stats>) -> Service {
        self.stats = stats;
        self
    }

    /// The reference's stats.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Swaps in a new configuration; requests in flight finish on the old one. Counters
    /// live in the store under keys made of the domain and descriptor, so they survive.
    pub fn replace_policies(&self, policies: PolicySet) {
        self.policies
            .store(Arc::new(self.options.prepare(policies)));
        self.forget_denials();
    }

    /// A limit may have grown: a denial cached under the old one may not hold.
    fn forget_denials(&self) {
        for (_, stores) in self.every_store() {
            stores.forget_all();
        }
    }

    /// Whether answers carry dynamic metadata (`RESPONSE_DYNAMIC_METADATA`).
    pub fn dynamic_metadata(&self) -> bool {
        self.options.dynamic_metadata
    }

    /// The live configuration.
    /// Sets `spillway_holds_in_use` of every `concurrency` rule to its holds in use now
    /// (a rule's keys whose holds have all lapsed are forgotten).
    pub fn count_holds(&self) {
        let now = self.now().as_micros();
        let policies = self.policies();
        for domain in policies.domains() {
            for rule in domain.rules().into_iter().filter(|r| r.holds()) {
                let holds = rule.counters.in_use.total(now);
                crate::metrics::holds_in_use(domain.shared_name(), rule, holds);
            }
        }
    }

    pub fn policies(&self) -> arc_swap::Guard<Arc<PolicySet>> {
        self.policies.load()
    }

    /// Adds the sync counts that are due to the store (see `GuardedStore::flush`).
    pub async fn flush(&self) {
        for (_, stores) in self.every_store() {
            stores.flush(self.clock.now()).await;
        }
    }

    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The rules of `domain` that denied over the last minutes, each with the keys it
    /// denied most (shadow rules' would-be denials included).
    /// The service's clock now.
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn top(&self, domain: &str) -> Vec<RuleTop> {
        self.top.top(domain, minute(self.clock.now()))
    }

    /// Decides a request.
    pub async fn check(&self, req: &Valid) -> Result<CheckResponse, CheckError> {
        self.checked(req, None).await.map(|(answer, _)| answer)
    }

    /// Decides a request; with `carried`, keeps its record with the request's charge
    /// (a reservation's, `reserve.rs`). Says how the store took part.
    pub(crate) async fn checked(
        &self,
        req: &Valid,
        carried: Option<&Carried<'_>>,
    ) -> Result<(CheckResponse, Checked), CheckError> {
        let policies = self.policies.load();
        let Some(domain) = policies.domain(&req.domain) else {
            metrics::domain_not_found();
            self.stats
                .domain_not_found(&req.domain, req.descriptors.len() as u64);
            let answer = CheckResponse {
                overall: Code::Ok,
                statuses: vec![Status::no_rule(); req.descriptors.len()],
                metadata: None,
                wait: std::time::Duration::ZERO,
                queued: None,
                waitable: false,
            };
            return Ok((answer, Checked::default()));
        };
        // Three stages over one value: match, decide, answer.
        let overrides = self.overrides.load();
        let rules = Rules::with(domain, overrides.as_ref());
        let mut check = self.matched(req, rules)?;
        let decided = self.decide(&mut check, carried).await?;
        let checked = Checked {
            degraded: decided.iter().any(|d| d.degraded),
            kept: carried.and_then(Carried::handle),
        };
        let answer = self.answer(req, domain.shared_name(), &check, &decided);
        if check
            .hits
            .iter()
            .any(|h| h.rule.holds() && h.refund.is_some())
        {
            self.released.notify_waiters();
        }
        Ok((answer, checked))
    }

    /// Whether a descriptor of `req` reaches a `concurrency` rule: whether deciding it
    /// may take holds.
    pub(crate) fn takes_holds(&self, req: &Valid) -> bool {
        let policies = self.policies.load();
        let Some(domain) = policies.domain(&req.domain) else {
            return false;
        };
        req.descriptors.iter().any(|d| {
            domain
                .resolve(&d.entries)
                .is_some_and(|m| m.rules.iter().any(Rule::holds))
        })
    }

    fn is_quota(&self, rule: &Rule) -> bool {
        rule.quota_mode || (self.options.global_quota && rule.reference)
    }
}

/// Minutes since the epoch.
fn minute(now: Timestamp) -> u64 {
    now.as_micros() / 60_000_000
}

/// Whether a rule's limit can give units back (what a reservation did not use).
pub(crate) fn rule_refunds(rule: &Rule) -> bool {
    match &rule.limit {
        RuleLimit::Limited(limit) => limit.algorithm().refunds(),
        _ => true,
    }
}
