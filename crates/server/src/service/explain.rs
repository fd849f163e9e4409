//! `POST /v1/explain`: what a check of the same body would do, consuming nothing. For
//! every descriptor the path it takes through the policy tree, every rule that applies
//! with its state read from the store (a look, cost 0), whether it would admit, and
//! which limit would deny the request.

use serde::Serialize;
use spillway_core::{Decision, Request, Store};
use spillway_policy::{Mode, RuleLimit};

use super::overrides::Rules;
use super::request::{CheckError, Valid, ceil_ms};
use super::status::Verdict;
use super::{Hit, Service};

/// What a check would do now.
#[derive(Debug, Serialize)]
pub struct Explanation {
    pub domain: String,
    /// Whether a policy file declares the domain (a check of an unknown domain is OK).
    pub domain_found: bool,
    /// Whether `/v1/check` would admit the request now.
    pub allowed: bool,
    /// The first limit that would deny it.
    pub denied_by: Option<DeniedBy>,
    pub descriptors: Vec<DescriptorExplanation>,
}

/// The limit that would deny a request.
#[derive(Debug, Serialize)]
pub struct DeniedBy {
    pub descriptor: usize,
    pub rule: String,
}

/// One descriptor.
#[derive(Debug, Serialize)]
pub struct DescriptorExplanation {
    pub entries: Vec<Entry>,
    /// The node each entry reached, and how it matched.
    pub path: Vec<PathStep>,
    /// Whether it matched rules (or carries Envoy's own limit).
    pub matched: bool,
    /// Why it matched none: where the path stopped and what exists there.
    pub unmatched: Option<String>,
    /// Envoy's per-descriptor limit, used instead of the configuration.
    pub override_limit: bool,
    /// The override (`/v1/limits`) whose limits apply to exactly this path, instead of
    /// the policy file's (whose path `path` still shows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overridden_by: Option<OverriddenBy>,
    pub limits: Vec<LimitExplanation>,
}

/// The override a descriptor's path has.
#[derive(Debug, Serialize)]
pub struct OverriddenBy {
    /// The path as text (`api_key=abc`).
    pub path: String,
    /// The change that set it, who made it and when.
    pub version: u64,
    pub by: String,
    pub at_ms: u64,
}

/// One `(key, value)` entry.
#[derive(Debug, Serialize)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

/// One entry's node in the policy tree.
#[derive(Debug, Serialize)]
pub struct PathStep {
    pub entry: usize,
    /// The node as configured: `key_value`, a wildcard, or `key`.
    pub node: String,
    /// `exact`, `wildcard` or `any value`.
    pub matched_by: &'static str,
}

/// One rule a descriptor matched.
#[derive(Debug, Serialize)]
pub struct LimitExplanation {
    /// The rule's name, or its config path.
    pub rule: String,
    pub path: String,
    /// `unlimited` and `block_all` for the reference's special rules.
    pub algorithm: &'static str,
    pub limit: Option<u64>,
    pub window_ms: Option<u64>,
    /// `enforce` or `shadow`.
    pub mode: &'static str,
    pub quota_mode: bool,
    /// What the rule does when the store fails: `open`, `closed` or `local`.
    pub on_store_error: &'static str,
    /// `exact`, or how servers share it (`lease of N`, `sync every T`).
    pub sharing: String,
    /// The rule that drops this one from the request (the reference's `replaces`).
    pub replaced_by: Option<String>,
    /// The counter key, when the rule counts.
    pub key: Option<String>,
    /// What a check would charge.
    pub cost: u64,
    /// The counter as the store holds it now.
    pub state: Option<LimitState>,
    /// A `shares` rule: the child and priority the request is decided as, and the
    /// child's terms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareExplanation>,
    /// Whether this limit would admit the request.
    pub would_admit: bool,
    /// Why the state could not be read.
    pub error: Option<String>,
}

/// Where a request stands in a `shares` tree: its child (`*` for a value the tree
/// does not list) with its guaranteed rate, ceiling, weight and burst per the parent's
/// window, and its priority (the lowest when it names none the rule lists).
#[derive(Debug, Serialize)]
pub struct ShareExplanation {
    pub child: String,
    pub priority: Option<String>,
    pub rate: u64,
    pub ceil: u64,
    pub weight: u64,
    pub burst: u64,
    /// Where the request stands now, read from the store: `None` when it could not be.
    pub place: Option<SharePlace>,
}

/// A request's place in a `shares` tree now, at its cost: how it would go and what
/// its child's guarantee, its borrowing and the parent have left (units).
#[derive(Debug, Serialize)]
pub struct SharePlace {
    /// `guaranteed`, `borrowed` or `refused`.
    pub path: &'static str,
    /// Borrowed or refused: within the child's fair share of what the others leave
    /// (else past it, the excess the lowest priorities are shed from first).
    pub fair: Option<bool>,
    /// Borrowed: how long it would wait (its rule's `max_wait` at most), ms.
    pub wait_ms: u64,
    /// Refused: when it could go, ms.
    pub retry_after_ms: Option<u64>,
    /// Units its child's guarantee has left now.
    pub guaranteed_left: u64,
    /// Units it could borrow now (its ceiling, and the parent at its band).
    pub borrowable_left: u64,
    /// Units the parent has left now.
    pub parent_left: u64,
}

impl SharePlace {
    fn of(place: spillway_core::algorithm::shares::Place) -> SharePlace {
        use spillway_core::algorithm::shares::Path;
        let ms = |us: u64| ceil_ms(std::time::Duration::from_micros(us));
        let (path, fair, wait_ms, retry_after_ms) = match place.path {
            Path::Guaranteed => ("guaranteed", None, 0, None),
            Path::Borrowed { wait, fair } => ("borrowed", Some(fair), ms(wait), None),
            Path::Denied { retry, fair } => ("refused", Some(fair), 0, Some(ms(retry))),
        };
        SharePlace {
            path,
            fair,
            wait_ms,
            retry_after_ms,
            guaranteed_left: place.guaranteed,
            borrowable_left: place.borrowable,
            parent_left: place.parent,
        }
    }
}

/// A counter as the store holds it.
#[derive(Debug, Serialize)]
pub struct LimitState {
    pub remaining: u64,
    pub reset_after_ms: u64,
    /// For a request that would be denied: when it would be admitted.
    pub retry_after_ms: Option<u64>,
    /// A `concurrency` rule: the holds in use, and in how long the oldest of them
    /// lapses if nobody gives it back (`None` with none in use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holds: Option<HoldsState>,
}

/// A `concurrency` rule's holds, as the store holds them.
#[derive(Debug, Serialize)]
pub struct HoldsState {
    pub in_use: u64,
    pub oldest_lapses_in_ms: Option<u64>,
}

/// The id a look at a `concurrency` rule's holds takes nothing under: a descriptor
/// value that no request sends.
const LOOK_ID: &[u8] = b"\0spillway-explain";

impl Service {
    /// What [`check`](Service::check) would answer for `req`, and why; nothing is
    /// charged. The state comes from the store itself (not the deny cache, nor a lease
    /// this server holds), read one rule at a time: two explains read the same.
    pub async fn explain(&self, req: &Valid) -> Result<Explanation, CheckError> {
        let policies = self.policies.load();
        let Some(domain) = policies.domain(&req.domain) else {
            return Ok(Explanation {
                domain: req.domain.clone(),
                domain_found: false,
                allowed: true,
                denied_by: None,
                descriptors: req
                    .descriptors
                    .iter()
                    .map(|d| DescriptorExplanation {
                        entries: entries(&d.entries),
                        path: Vec::new(),
                        matched: false,
                        unmatched: Some(format!("no policy file declares domain `{}`", req.domain)),
                        override_limit: false,
                        overridden_by: None,
                        limits: Vec::new(),
                    })
                    .collect(),
            });
        };
        let overrides = self.overrides.load();
        let rules = Rules::with(domain, overrides.as_ref());
        let hits = self.hits(req, rules)?;
        let now = self.clock.now();

        let mut descriptors: Vec<DescriptorExplanation> = req
            .descriptors
            .iter()
            .map(|d| {
                let trace = domain.trace(&d.entries);
                let overridden_by = rules.overridden(&d.entries).map(|o| OverriddenBy {
                    path: super::overrides::path_text(&d.entries),
                    version: o.version,
                    by: o.by.to_string(),
                    at_ms: o.at_ms,
                });
                let overridden = overridden_by.is_some();
                DescriptorExplanation {
                    entries: entries(&d.entries),
                    path: trace
                        .steps
                        .iter()
                        .map(|s| PathStep {
                            entry: s.entry,
                            node: s.node.clone(),
                            matched_by: s.how.name(),
                        })
                        .collect(),
                    matched: d.limit.is_some() || overridden || trace.matched.is_some(),
                    unmatched: (d.limit.is_none() && !overridden)
                        .then(|| trace.unmatched.map(|u| u.to_string()))
                        .flatten(),
                    override_limit: d.limit.is_some(),
                    overridden_by,
                    limits: Vec::new(),
                }
            })
            .collect();

        let (mut denied_by, mut verdict) = (None, Verdict::default());
        for hit in &hits {
            let replaced_by = hit.rule.name.as_ref().and_then(|name| {
                hits.iter()
                    .find(|o| o.rule.replaces.contains(name))
                    .map(|o| rule_name(o))
            });
            let mut limit = self.explain_hit(hit, replaced_by, now).await;
            if limit.replaced_by.is_none() {
                let enforcing_before = verdict.enforcing_over();
                verdict.add(
                    self.is_quota(&hit.rule),
                    !limit.would_admit,
                    hit.rule.mode == Mode::Enforce,
                );
                if verdict.enforcing_over() && !enforcing_before {
                    denied_by = Some(DeniedBy {
                        descriptor: hit.descriptor,
                        rule: limit.rule.clone(),
                    });
                }
            } else {
                limit.would_admit = true;
            }
            descriptors[hit.descriptor].limits.push(limit);
        }
        if denied_by.is_none() && verdict.over() {
            let (i, l) = descriptors
                .iter()
                .enumerate()
                .find_map(|(i, d)| d.limits.iter().find(|l| !l.would_admit).map(|l| (i, l)))
                .expect("a quota rule would deny");
            denied_by = Some(DeniedBy {
                descriptor: i,
                rule: l.rule.clone(),
            });
        }
        let allowed = denied_by.is_none() || self.options.global_shadow;
        Ok(Explanation {
            domain: req.domain.clone(),
            domain_found: true,
            allowed,
            denied_by,
            descriptors,
        })
    }

    /// One rule: its settings, and its counter read with a look (cost 0).
    async fn explain_hit(
        &self,
        hit: &Hit<'_>,
        replaced_by: Option<String>,
        now: spillway_core::Timestamp,
    ) -> LimitExplanation {
        let rule = &hit.rule;
        let policy = rule.on_store_error.unwrap_or(self.options.on_store_error);
        let mut out = LimitExplanation {
            rule: rule_name(hit),
            path: rule.metric.to_string(),
            algorithm: "unlimited",
            limit: None,
            window_ms: None,
            mode: rule.mode.name(),
            quota_mode: self.is_quota(rule),
            on_store_error: policy.name(),
            sharing: rule.sharing.to_string(),
            replaced_by,
            key: hit.key.as_ref().map(|k| k.as_str().to_owned()),
            cost: hit.cost,
            state: None,
            share: None,
            would_admit: true,
            error: None,
        };
        let limit = match &rule.limit {
            RuleLimit::Unlimited => return out,
            RuleLimit::BlockAll => {
                out.algorithm = "block_all";
                out.limit = Some(0);
                out.would_admit = false;
                return out;
            }
            RuleLimit::Limited(limit) => limit,
        };
        out.algorithm = limit.algorithm().name();
        out.share = hit.member.as_deref().and_then(|m| share_of(rule, limit, m));
        out.limit = Some(limit.limit());
        out.window_ms = Some(ceil_ms(limit.window()));
        let Some(key) = &hit.key else { return out };
        let mut look = Request::new(key, limit, 0);
        if let Some(m) = &hit.member {
            look = look.with_member(m.as_bytes());
        }
        let store = self.stores_for(&hit.rule).1.store();
        if let (Some(share), Some(member)) = (out.share.as_mut(), &hit.member) {
            // Read, not decided: the tree as the store holds it, placed in core.
            share.place = match store.shares_state(key, limit, now).await {
                Ok(state) => limit
                    .share_place(&state.unwrap_or_default(), now, hit.cost, member.as_bytes())
                    .map(SharePlace::of),
                Err(_) => None,
            };
        }
        match store.check(&[look], now).await {
            Ok(batch) => {
                let d: &Decision = &batch.decisions[0];
                out.would_admit = if limit.algorithm().counts_members() {
                    d.allowed() || hit.cost == 0
                } else {
                    hit.cost <= d.remaining
                };
                let holds = match limit.algorithm().holds() {
                    true => Some(self.holds(store, key, limit, d, now).await),
                    false => None,
                };
                out.state = Some(LimitState {
                    remaining: d.remaining,
                    reset_after_ms: ceil_ms(d.reset_after),
                    retry_after_ms: d.retry_after().map(ceil_ms),
                    holds,
                });
            }
            Err(e) => {
                out.error = Some(format!("the store could not be read: {e}"));
                out.would_admit = policy != spillway_policy::OnStoreError::Closed;
            }
        }
        out
    }
}

impl Service {
    /// A `concurrency` rule's holds, from the look `seen`: the slots in use, and when
    /// the oldest lapses, which a take of one slot more than remain says (denied, it is
    /// charged nothing: when one slot frees, the soonest lapse).
    async fn holds(
        &self,
        store: &impl spillway_core::Store,
        key: &spillway_core::Key,
        limit: &spillway_core::Limit,
        seen: &Decision,
        now: spillway_core::Timestamp,
    ) -> HoldsState {
        let in_use = limit.limit() - seen.remaining;
        if in_use == 0 {
            return HoldsState {
                in_use,
                oldest_lapses_in_ms: None,
            };
        }
        let one_more = Request::new(key, limit, seen.remaining + 1).with_member(LOOK_ID);
        let lapse = match store.check(&[one_more], now).await {
            Ok(batch) => batch.decisions[0].retry_after().map(ceil_ms),
            Err(_) => None,
        };
        HoldsState {
            in_use,
            oldest_lapses_in_ms: lapse,
        }
    }
}

/// The child and priority a `shares` member names, with the child's terms.
fn share_of(
    rule: &spillway_policy::Rule,
    limit: &spillway_core::Limit,
    member: &str,
) -> Option<ShareExplanation> {
    let (child, priority) = rule.share_of_member(member);
    let (_, share) = limit
        .shares()?
        .children()
        .iter()
        .find(|(n, _)| n == child)?;
    let (rate, ceil, weight, burst) = share.numbers();
    Some(ShareExplanation {
        child: child.to_owned(),
        priority: priority.map(str::to_owned),
        rate,
        ceil,
        weight,
        burst,
        place: None,
    })
}

fn entries(entries: &[(String, String)]) -> Vec<Entry> {
    entries
        .iter()
        .map(|(k, v)| Entry {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

fn rule_name(hit: &Hit<'_>) -> String {
    hit.rule
        .name
        .as_deref()
        .map_or_else(|| hit.rule.metric.to_string(), str::to_owned)
}
