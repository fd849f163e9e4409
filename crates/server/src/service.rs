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
use spillway_core::{
    Clock, Decision, Guard, Key, Request, Source, StoreFailure, Timestamp, Unanswered,
};
use spillway_policy::{Metadata, Mode, OnStoreError, PolicySet, Rule, RuleLimit, override_key};

pub(crate) mod candidate;
mod explain;
pub(crate) mod request;
mod status;

use crate::metrics;
use crate::store::{self, Stores};
use crate::top::{RuleTop, TopKeys};
pub use explain::{
    DeniedBy, DescriptorExplanation, Explanation, LimitExplanation, LimitState, PathStep,
};
pub use request::CheckError;
use request::{CheckRequest, CheckResponse, Code, Status};
use status::{Rank, Verdict, rule_status};

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
}

impl Default for Options {
    fn default() -> Options {
        Options {
            global_shadow: false,
            global_quota: false,
            on_store_error: OnStoreError::Closed,
            near_limit_ratio: 0.8,
            key_prefix: String::new(),
            stop_increment_when_over_limit: false,
            dynamic_metadata: false,
        }
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
    /// What a `distinct` rule counts: the descriptor's last value.
    member: Option<String>,
}

/// A rule's decision, and whether a failure policy made it instead of the store.
type Decided = (usize, Decision, bool);

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
        }
    }

    /// Swaps in a new configuration; requests in flight finish on the old one. Counters
    /// live in the store under keys made of the domain and descriptor, so they survive.
    pub fn replace_policies(&self, policies: PolicySet) {
        self.policies
            .store(Arc::new(self.options.prepare(policies)));
        // A limit may have grown: a denial cached under the old one may not hold.
        self.stores.forget_all();
    }

    /// Whether answers carry dynamic metadata (`RESPONSE_DYNAMIC_METADATA`).
    pub fn dynamic_metadata(&self) -> bool {
        self.options.dynamic_metadata
    }

    /// The live configuration.
    pub fn policies(&self) -> arc_swap::Guard<Arc<PolicySet>> {
        self.policies.load()
    }

    /// Adds the sync counts that are due to the store (see `GuardedStore::flush`).
    pub async fn flush(&self) {
        self.stores.flush(self.clock.now()).await;
    }

    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The rules of `domain` that denied over the last minutes, each with the keys it
    /// denied most (shadow rules' would-be denials included).
    pub fn top(&self, domain: &str) -> Vec<RuleTop> {
        self.top.top(domain, minute(self.clock.now()))
    }

    /// Decides a request.
    pub async fn check(&self, req: &CheckRequest) -> Result<CheckResponse, CheckError> {
        req.validate()?;
        let policies = self.policies.load();
        let Some(domain) = policies.domain(&req.domain) else {
            metrics::domain_not_found();
            return Ok(CheckResponse {
                overall: Code::Ok,
                statuses: vec![Status::no_rule(); req.descriptors.len()],
                metadata: None,
            });
        };

        let mut hits = self.hits(req, domain)?;
        drop_replaced(&mut hits);

        let now = self.clock.now();
        let counted = |h: &Hit<'_>| h.key.is_some();
        // With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, a request of reference rules only
        // is one round whatever their modes, as the reference decides it: any rule over
        // its limit (shadow or quota-mode included) stops the others' counting.
        let one_round = self.options.stop_increment_when_over_limit
            && hits.iter().all(|h| !counted(h) || h.rule.reference);
        let independent =
            |h: &Hit<'_>| !one_round && (h.rule.mode == Mode::Shadow || self.is_quota(&h.rule));
        let first: Vec<usize> = (0..hits.len())
            .filter(|&i| counted(&hits[i]) && !independent(&hits[i]))
            .collect();
        let second: Vec<usize> = (0..hits.len())
            .filter(|&i| counted(&hits[i]) && independent(&hits[i]))
            .collect();
        if one_round && self.stores.store().is_cluster() {
            self.stop_across_slots(&mut hits, &first, now).await?;
        }
        let (a, b) = tokio::join!(
            self.round(&hits, &first, now),
            self.round(&hits, &second, now)
        );
        let mut decided = a?;
        decided.extend(b?);
        decided.sort_unstable_by_key(|d| d.0);

        Ok(self.aggregate(req, domain.shared_name(), &hits, &decided, now))
    }

    /// Every rule each descriptor matched (or its override), with its counter key.
    fn hits<'p>(
        &self,
        req: &CheckRequest,
        domain: &'p spillway_policy::Domain,
    ) -> Result<Vec<Hit<'p>>, CheckError> {
        let mut hits = Vec::with_capacity(req.descriptors.len());
        for (i, d) in req.descriptors.iter().enumerate() {
            // At most 2^53: `CheckRequest::validate` checked it.
            let cost = d.hits.unwrap_or(req.hits);
            let invalid =
                |e: spillway_core::Error| CheckError::Invalid(format!("descriptor {i}: {e}"));
            if let Some(o) = d.limit {
                let mut rule = Rule::reference(o.requests_per_unit, o.unit);
                if self.options.stop_increment_when_over_limit {
                    rule = rule.charging_own_rejections();
                }
                rule.metric = Arc::clone(&self.override_path);
                let key = counts(&rule)
                    .then(|| override_key(domain, &d.entries))
                    .transpose()
                    .map_err(invalid)?;
                hits.push(Hit {
                    descriptor: i,
                    rule: Cow::Owned(rule),
                    key,
                    cost,
                    member: None,
                });
            } else if let Some(m) = domain.resolve(&d.entries) {
                for rule in m.rules {
                    let key = counts(rule)
                        .then(|| m.key(rule))
                        .transpose()
                        .map_err(invalid)?;
                    // A distinct rule counts the request's member once, whatever its hits.
                    let (member, cost) = if rule.counts_members() {
                        (d.entries.last().map(|(_, v)| v.to_string()), cost.min(1))
                    } else {
                        (None, cost)
                    };
                    hits.push(Hit {
                        descriptor: i,
                        rule: Cow::Borrowed(rule),
                        key,
                        cost,
                        member,
                    });
                }
            }
        }
        Ok(hits)
    }

    fn is_quota(&self, rule: &Rule) -> bool {
        rule.quota_mode || (self.options.global_quota && rule.reference)
    }

    /// The store rounds for the hits at `which`. On Redis Cluster each descriptor's
    /// limits share a slot, but different descriptors do not: there each descriptor is
    /// its own round (all of them at once), all-or-nothing within the descriptor.
    async fn round(
        &self,
        hits: &[Hit<'_>],
        which: &[usize],
        now: Timestamp,
    ) -> Result<Vec<Decided>, CheckError> {
        let spans_slots = spans_descriptors(hits, which);
        if !(self.stores.store().is_cluster() && spans_slots) {
            return self.round_on_one_slot(hits, which, now).await;
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for &i in which {
            match groups.last_mut() {
                Some(g) if hits[g[0]].descriptor == hits[i].descriptor => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        let rounds = groups.iter().map(|g| self.round_on_one_slot(hits, g, now));
        let mut decided = Vec::with_capacity(which.len());
        for result in futures_util::future::join_all(rounds).await {
            decided.extend(result?);
        }
        Ok(decided)
    }

    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` on Redis Cluster, where a request's
    /// descriptors are in different slots and no one script sees them all: as the
    /// reference does, look first (cost 0), and if some rule would go over its limit,
    /// charge the others nothing. Two round trips, not atomic (as the reference's GET
    /// then INCRBY); one slot needs neither, its script decides it whole.
    async fn stop_across_slots(
        &self,
        hits: &mut [Hit<'_>],
        which: &[usize],
        now: Timestamp,
    ) -> Result<(), CheckError> {
        let spans_slots = spans_descriptors(hits, which);
        if !spans_slots {
            return Ok(());
        }
        let costs: Vec<u64> = hits.iter().map(|h| h.cost).collect();
        for &i in which {
            hits[i].cost = 0;
        }
        let looked = self.round(hits, which, now).await;
        for (h, cost) in hits.iter_mut().zip(&costs) {
            h.cost = *cost;
        }
        let over: Vec<usize> = looked?
            .into_iter()
            .filter(|(i, d, _)| !d.allowed() || d.remaining < hits[*i].cost)
            .map(|(i, _, _)| i)
            .collect();
        if !over.is_empty() {
            for &i in which {
                if !over.contains(&i) {
                    hits[i].cost = 0;
                }
            }
        }
        Ok(())
    }

    /// One store round; a failure goes to the rules' failure policies.
    async fn round_on_one_slot(
        &self,
        hits: &[Hit<'_>],
        which: &[usize],
        now: Timestamp,
    ) -> Result<Vec<Decided>, CheckError> {
        if which.is_empty() {
            return Ok(Vec::new());
        }
        let batch = requests(hits, which);
        let guards: Vec<Guard> = which
            .iter()
            .map(|&i| {
                let rule = &hits[i].rule;
                let policy = rule.on_store_error.unwrap_or(self.options.on_store_error);
                Guard::new(rule.mode, policy).sharing(rule.sharing)
            })
            .collect();
        let answer = match self.stores.decide(&batch, &guards, now).await {
            Ok(answer) => answer,
            Err(Unanswered::Invalid(e)) => return Err(CheckError::Invalid(e.to_string())),
            Err(Unanswered::Unavailable(failure)) => {
                self.failed(&failure, true);
                metrics::fallback("closed");
                return Err(CheckError::Unavailable(failure.to_string()));
            }
        };
        if let Some(failure) = &answer.failure {
            self.failed(failure, false);
        }
        let mut locally = false;
        let decided = which
            .iter()
            .zip(answer.batch.decisions)
            .zip(answer.sources)
            .map(|((&i, d), source)| {
                match source {
                    Source::Store => {}
                    Source::Cache => metrics::deny_cache_hit(),
                    Source::Share => metrics::share_hit(),
                    Source::Local => locally = true,
                    Source::Open => metrics::fallback("open"),
                }
                // `degraded`: a failure policy decided, not the store (nor its cache).
                (i, d, matches!(source, Source::Local | Source::Open))
            })
            .collect();
        if locally {
            metrics::fallback("local");
        }
        Ok(decided)
    }

    /// A round the store did not answer: metrics, and a log line for a failed call.
    fn failed(&self, failure: &StoreFailure, closed: bool) {
        store::observe(&self.stores, failure);
        // Only failed calls are logged: while the breaker is open nothing new is
        // learned, and a line per request would flood the log during an outage.
        if !matches!(failure, StoreFailure::BreakerOpen) {
            tracing::warn!(error = %failure, closed, "store failed; answering by each rule's on_store_error");
        }
    }

    /// Statuses per descriptor and the overall code, as the reference combines them.
    fn aggregate(
        &self,
        req: &CheckRequest,
        domain: &Arc<str>,
        hits: &[Hit<'_>],
        decided: &[Decided],
        now: Timestamp,
    ) -> CheckResponse {
        let mut statuses = vec![Status::no_rule(); req.descriptors.len()];
        let mut ranks = vec![Rank::Nothing; req.descriptors.len()];
        let mut verdict = Verdict::default();
        let mut next = decided.iter().peekable();

        for (i, hit) in hits.iter().enumerate() {
            let decision = next.next_if(|d| d.0 == i).map(|d| (d.1, d.2));
            let status = rule_status(&hit.rule, decision, now);
            let over = status.code == Code::OverLimit || status.shadow_denied;
            // A status is OVER_LIMIT only for an enforcing rule.
            verdict.add(
                self.is_quota(&hit.rule),
                over,
                status.code == Code::OverLimit,
            );
            self.record(domain, hit, &status, decision.map(|d| d.0));
            if over && let Some(key) = &hit.key {
                let name = hit.rule.name.as_ref().unwrap_or(&hit.rule.metric);
                self.top
                    .record(domain, &hit.rule.metric, name, key.as_str(), minute(now));
            }

            let rank = Rank::of(&status);
            let slot = hit.descriptor;
            if (rank, status.remaining) < (ranks[slot], statuses[slot].remaining) {
                ranks[slot] = rank;
                statuses[slot] = status;
            }
        }

        let overall = if verdict.over() && !self.options.global_shadow {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let metadata = self
            .options
            .dynamic_metadata
            .then(|| passing_metadata(hits, &statuses));
        CheckResponse {
            overall,
            statuses,
            metadata,
        }
    }

    fn record(
        &self,
        domain: &Arc<str>,
        hit: &Hit<'_>,
        status: &Status,
        decision: Option<Decision>,
    ) {
        if matches!(hit.rule.limit, RuleLimit::Unlimited) {
            return; // the reference keeps no stats for unlimited rules
        }
        let outcome = match (status.code, status.shadow_denied) {
            (Code::OverLimit, _) => "over_limit",
            (Code::Ok, true) => "shadow_over_limit",
            (Code::Ok, false) => "ok",
        };
        metrics::decision(domain, &hit.rule, outcome);
        if let Some(d) = decision.filter(|d| d.allowed()) {
            let near = (d.limit as f64 * self.options.near_limit_ratio).floor() as u64;
            if d.limit - d.remaining >= near.max(1) {
                metrics::near_limit(domain, &hit.rule);
            }
        }
    }
}

/// The `metadata` of the rules that counted for descriptors not over their limit, in
/// request order, merged as the reference merges them: the first value of a key wins,
/// maps under one key merge recursively. (Unlimited, replaced and unmatched
/// descriptors have no rule here.)
fn passing_metadata(hits: &[Hit<'_>], statuses: &[Status]) -> Metadata {
    let mut merged = Metadata::new();
    for hit in hits {
        let passed = statuses[hit.descriptor].code != Code::OverLimit;
        let counts = !matches!(hit.rule.limit, RuleLimit::Unlimited);
        if let (true, true, Some(m)) = (passed, counts, &hit.rule.metadata) {
            merge_metadata(&mut merged, m);
        }
    }
    merged
}

fn merge_metadata(into: &mut Metadata, from: &Metadata) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (None, _) => {
                into.insert(k.clone(), v.clone());
            }
            (Some(serde_json::Value::Object(a)), serde_json::Value::Object(b)) => {
                merge_metadata(a, b);
            }
            (Some(_), _) => {} // the first wins
        }
    }
}

/// Whether the hits at `which` (in descriptor order) belong to more than one
/// descriptor: on Redis Cluster, more than one slot.
fn spans_descriptors(hits: &[Hit<'_>], which: &[usize]) -> bool {
    which
        .windows(2)
        .any(|w| hits[w[0]].descriptor != hits[w[1]].descriptor)
}

/// Minutes since the epoch.
fn minute(now: Timestamp) -> u64 {
    now.as_micros() / 60_000_000
}

fn counts(rule: &Rule) -> bool {
    matches!(rule.limit, RuleLimit::Limited(_))
}

/// The reference's `replaces`: a matched rule named by another matched rule's `replaces`
/// is dropped from the request (its descriptor reports no limit, nothing is counted).
fn drop_replaced(hits: &mut Vec<Hit<'_>>) {
    if hits.iter().all(|h| h.rule.replaces.is_empty()) {
        return;
    }
    let replaced: Vec<Arc<str>> = hits
        .iter()
        .flat_map(|h| h.rule.replaces.iter().cloned())
        .collect();
    hits.retain(|h| h.rule.name.as_ref().is_none_or(|n| !replaced.contains(n)));
}

fn requests<'h>(hits: &'h [Hit<'_>], which: &[usize]) -> Vec<Request<'h>> {
    which
        .iter()
        .filter_map(|&i| {
            let hit = &hits[i];
            match (&hit.rule.limit, &hit.key) {
                (RuleLimit::Limited(limit), Some(key)) => {
                    let request = Request::new(key, limit, hit.cost);
                    Some(match &hit.member {
                        Some(m) => request.with_member(m.as_bytes()),
                        None => request,
                    })
                }
                _ => None,
            }
        })
        .collect()
}
