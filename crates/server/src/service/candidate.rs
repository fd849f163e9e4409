//! Candidate policies in shadow: a second policy set decided on the same live traffic,
//! after the live answer, on counters of its own (the live keys' groups under
//! `~candidate|`, in the same store), answering nobody. What it would have decided is
//! counted per rule, and where it disagrees with the live answer, per kind: `would_deny`
//! (live admitted, the candidate would not) and `would_admit` (the reverse). At most
//! [`IN_FLIGHT`] evaluations run at once; past that they are dropped and counted, so a
//! candidate never queues behind the live traffic nor holds it up.

use std::sync::Arc;

use arc_swap::ArcSwap;
use spillway_core::{Key, Store};
use spillway_policy::{Mode, PolicySet, RuleLimit};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::request::CheckRequest;
use super::status::Verdict;
use super::{Service, drop_replaced, requests};
use crate::metrics;

/// Candidate evaluations running at once, at most.
pub const IN_FLIGHT: usize = 64;

/// The candidate policy set and its bound.
#[derive(Debug)]
pub(crate) struct Candidate {
    policies: ArcSwap<PolicySet>,
    permits: Arc<Semaphore>,
}

impl Candidate {
    pub(crate) fn new(policies: PolicySet) -> Candidate {
        Candidate {
            policies: ArcSwap::from_pointee(policies),
            permits: Arc::new(Semaphore::new(IN_FLIGHT)),
        }
    }
}

impl Service {
    /// This service with a candidate policy set decided in shadow beside the live one.
    pub fn with_candidate(mut self, policies: PolicySet) -> Service {
        self.candidate = Some(Candidate::new(policies));
        self
    }

    /// The candidate policy set, if there is one.
    pub fn candidate_policies(&self) -> Option<Arc<PolicySet>> {
        self.candidate.as_ref().map(|c| c.policies.load_full())
    }

    /// Swaps in a new candidate set (a reload).
    pub fn replace_candidate(&self, policies: PolicySet) {
        if let Some(c) = &self.candidate {
            c.policies.store(Arc::new(policies));
        }
    }

    /// A place for one candidate evaluation: `None` without a candidate, or when
    /// [`IN_FLIGHT`] are running (counted as dropped).
    pub fn candidate_permit(&self) -> Option<OwnedSemaphorePermit> {
        let c = self.candidate.as_ref()?;
        let permit = Arc::clone(&c.permits).try_acquire_owned().ok();
        if permit.is_none() {
            metrics::candidate_dropped();
        }
        permit
    }

    /// Decides `req` under the candidate set on its own counters and counts what it
    /// would have answered against `live_allowed`, the live answer.
    pub async fn candidate_check(&self, req: &CheckRequest, live_allowed: bool) {
        let Some(policies) = self.candidate_policies() else {
            return;
        };
        let Some(domain) = policies.domain(&req.domain) else {
            return;
        };
        let Ok(mut hits) = self.hits(req, domain) else {
            return;
        };
        drop_replaced(&mut hits);
        // Its own counters: every key's group under `~candidate|`.
        for hit in &mut hits {
            hit.key = hit.key.as_ref().and_then(candidate_key);
        }
        let now = self.clock.now();
        let mut verdict = Verdict::default();
        // One store call per descriptor: their keys are in different Cluster slots.
        let mut start = 0;
        while start < hits.len() {
            let d = hits[start].descriptor;
            let end = start
                + hits[start..]
                    .iter()
                    .take_while(|h| h.descriptor == d)
                    .count();
            // A key is set exactly for the rules that count (`hits`).
            let counted: Vec<usize> = (start..end).filter(|&i| hits[i].key.is_some()).collect();
            let mut over: Vec<(usize, bool)> = (start..end)
                .filter(|&i| matches!(hits[i].rule.limit, RuleLimit::BlockAll))
                .map(|i| (i, true))
                .collect();
            start = end;
            if !counted.is_empty() {
                match self
                    .stores
                    .store()
                    .check(&requests(&hits, &counted), now)
                    .await
                {
                    Ok(answer) => over.extend(
                        counted
                            .iter()
                            .zip(&answer.decisions)
                            .map(|(&i, d)| (i, !d.allowed())),
                    ),
                    Err(_) => {
                        metrics::candidate_error();
                        continue;
                    }
                }
            }
            for (i, is_over) in over {
                let rule = &hits[i].rule;
                let outcome = match (is_over, rule.mode) {
                    (false, _) => "ok",
                    (true, Mode::Enforce) => "over_limit",
                    (true, Mode::Shadow) => "shadow_over_limit",
                };
                metrics::candidate_decision(domain.shared_name(), &rule.metric, outcome);
                verdict.add(self.is_quota(rule), is_over, rule.mode == Mode::Enforce);
            }
        }
        let candidate_allowed = !verdict.over() || self.options.global_shadow;
        match (live_allowed, candidate_allowed) {
            (true, false) => metrics::candidate_disagreement(domain.shared_name(), "would_deny"),
            (false, true) => metrics::candidate_disagreement(domain.shared_name(), "would_admit"),
            _ => {}
        }
    }
}

/// A counter key under the candidate's own prefix.
fn candidate_key(key: &Key) -> Option<Key> {
    Key::grouped(&format!("~candidate|{}", key.group()), key.member()).ok()
}
