//! Candidate policies in shadow: a second policy set decided on the same live traffic,
//! after the live answer, on counters of its own (the live keys' groups under
//! `~candidate|`, in the same store), answering nobody. What it would have decided is
//! counted per rule, and where it disagrees with the live answer, per kind: `would_deny`
//! (live admitted, the candidate would not) and `would_admit` (the reverse). Requests
//! wait for it in a queue of [`QUEUE`] requests and [`QUEUE_BYTES`] (`Service::shadow` puts them there after the live
//! answer; a thread of the lowest priority takes them [`BATCH`] at a time, `queue.rs`);
//! past that they are dropped and counted, so a candidate never holds up the live
//! traffic.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use parking_lot::Mutex;
use spillway_core::Store;
use spillway_policy::{Mode, PolicySet, Rule, RuleLimit};
use tokio::sync::mpsc;

use super::Service;
use super::decide::requests;
use super::matched::drop_replaced;
use super::overrides::Rules;
use super::request::Valid;
use super::status::Verdict;
use crate::metrics;

mod queue;

/// A request for the candidate set, with the live answer (`true`: admitted).
type ForCandidate = (Valid, bool);

/// What every candidate counter key starts with: the candidate's counters are its own.
pub const KEY_PREFIX: &str = "~candidate|";

/// Requests waiting for the candidate, at most; past that they are dropped.
pub const QUEUE: usize = 1024;
/// Bytes of requests waiting for the candidate, at most (a request may be 64 KiB of
/// descriptors); past that they are dropped.
pub const QUEUE_BYTES: usize = 4 << 20;
/// Requests the candidate decides at once (concurrently, on one task).
pub const BATCH: usize = 64;
/// After a batch that was not full, how long the next one gathers before it is taken:
/// the candidate decides up to this much later than the live answer.
pub const GATHER: std::time::Duration = std::time::Duration::from_millis(1);

/// The candidate policy set.
#[derive(Debug)]
pub(crate) struct Candidate {
    policies: ArcSwap<PolicySet>,
    /// Requests waiting for the candidate set: made, with the thread that takes them, at
    /// the first request that needs it.
    queue: OnceLock<mpsc::Sender<ForCandidate>>,
    /// Bytes of the requests in the queue (see [`QUEUE_BYTES`]).
    queued: Arc<AtomicUsize>,
}

impl Candidate {
    pub(crate) fn new(policies: PolicySet) -> Candidate {
        Candidate {
            policies: ArcSwap::from_pointee(policies.with_key_prefix(KEY_PREFIX)),
            queue: OnceLock::new(),
            queued: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// Bytes a request holds while it waits: its descriptors' keys and values, and their
/// vectors.
pub(crate) fn queued_bytes(req: &Valid) -> usize {
    std::mem::size_of::<Valid>()
        + req.domain.len()
        + req
            .descriptors
            .iter()
            .map(|d| {
                std::mem::size_of_val(d)
                    + d.entries
                        .iter()
                        .map(|(k, v)| std::mem::size_of::<(String, String)>() + k.len() + v.len())
                        .sum::<usize>()
            })
            .sum::<usize>()
}

impl Service {
    /// This service with a candidate policy set decided in shadow beside the live one.
    pub fn with_candidate(mut self, policies: PolicySet) -> Service {
        self.candidate = Some(Candidate::new(self.options.prepare(policies)));
        self
    }

    /// The candidate policy set, if there is one.
    pub fn candidate_policies(&self) -> Option<Arc<PolicySet>> {
        self.candidate.as_ref().map(|c| c.policies.load_full())
    }

    /// Swaps in a new candidate set (a reload).
    pub fn replace_candidate(&self, policies: PolicySet) {
        if let Some(c) = &self.candidate {
            let policies = self.options.prepare(policies).with_key_prefix(KEY_PREFIX);
            c.policies.store(Arc::new(policies));
        }
    }

    /// After the live answer (`live_allowed`), and without holding it up: queues `req`
    /// for the candidate set, if there is one; a full queue drops it, counted.
    pub(crate) fn shadow(self: &Arc<Service>, req: Valid, live_allowed: bool) {
        let Some(candidate) = &self.candidate else {
            return;
        };
        let queue = candidate
            .queue
            .get_or_init(|| queue::spawn(Arc::downgrade(self), Arc::clone(&candidate.queued)));
        let bytes = queued_bytes(&req);
        if candidate.queued.fetch_add(bytes, Ordering::AcqRel) + bytes > QUEUE_BYTES {
            candidate.queued.fetch_sub(bytes, Ordering::AcqRel);
            metrics::candidate_dropped();
            return;
        }
        if queue.try_send((req, live_allowed)).is_err() {
            candidate.queued.fetch_sub(bytes, Ordering::AcqRel);
            metrics::candidate_dropped();
        }
    }

    /// Whether there is a candidate set to decide requests under.
    pub fn has_candidate(&self) -> bool {
        self.candidate.is_some()
    }

    /// Decides a batch of requests under the candidate set, each on its own counters,
    /// their store calls overlapping, and counts what it would have answered against each
    /// request's live answer (`true`: admitted). The metrics are added once per batch.
    pub async fn candidate_check(&self, batch: &[(Valid, bool)]) {
        let Some(policies) = self.candidate_policies() else {
            return;
        };
        let tally = Mutex::new(Tally::default());
        // One time for the batch: it gathered over a millisecond at most.
        let now = self.clock.now();
        if self.stores.store().is_local() {
            // Nothing to wait for: one after another costs less than polling them together.
            for (req, live_allowed) in batch {
                self.candidate_one(&policies, req, *live_allowed, now, &tally)
                    .await;
            }
        } else {
            join_all(batch.iter().map(|(req, live_allowed)| {
                self.candidate_one(&policies, req, *live_allowed, now, &tally)
            }))
            .await;
        }
        tally.into_inner().flush();
    }

    async fn candidate_one<'p>(
        &self,
        policies: &'p PolicySet,
        req: &Valid,
        live_allowed: bool,
        now: spillway_core::Timestamp,
        tally: &Mutex<Tally<'p>>,
    ) {
        let Some(domain) = policies.domain(&req.domain) else {
            return;
        };
        // Its own counters: the set's keys are under `KEY_PREFIX`.
        let Ok(mut hits) = self.hits(req, Rules::of_file(domain)) else {
            return;
        };
        drop_replaced(&mut hits);
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
            let mut tally = tally.lock();
            for (i, is_over) in over {
                let rule = &hits[i].rule;
                let outcome = match (is_over, rule.mode) {
                    (false, _) => "ok",
                    (true, Mode::Enforce) => "over_limit",
                    (true, Mode::Shadow) => "shadow_over_limit",
                };
                match rule {
                    Cow::Borrowed(rule) => tally.decision(domain.shared_name(), rule, outcome),
                    // Envoy's own limit for the descriptor: made for this request.
                    Cow::Owned(rule) => {
                        metrics::candidate_decision(domain.shared_name(), rule, outcome, 1);
                    }
                }
                verdict.add(self.is_quota(rule), is_over, rule.mode == Mode::Enforce);
            }
        }
        let candidate_allowed = !verdict.over() || self.options.global_shadow;
        let kind = match (live_allowed, candidate_allowed) {
            (true, false) => "would_deny",
            (false, true) => "would_admit",
            _ => return,
        };
        tally.lock().disagreement(domain.shared_name(), kind);
    }
}

/// A batch's candidate metrics, added up before they reach the recorder: one counter
/// update per rule and outcome, not one per request.
#[derive(Default)]
struct Tally<'p> {
    decisions: Vec<(&'p Arc<str>, &'p Rule, &'static str, u64)>,
    disagreements: Vec<(&'p Arc<str>, &'static str, u64)>,
}

impl<'p> Tally<'p> {
    fn decision(&mut self, domain: &'p Arc<str>, rule: &'p Rule, outcome: &'static str) {
        let same = |(d, r, o, _): &&mut (&Arc<str>, &Rule, &str, u64)| {
            Arc::ptr_eq(d, domain) && std::ptr::eq(*r, rule) && *o == outcome
        };
        match self.decisions.iter_mut().find(same) {
            Some(entry) => entry.3 += 1,
            None => self.decisions.push((domain, rule, outcome, 1)),
        }
    }

    fn disagreement(&mut self, domain: &'p Arc<str>, kind: &'static str) {
        match self
            .disagreements
            .iter_mut()
            .find(|(d, k, _)| Arc::ptr_eq(d, domain) && *k == kind)
        {
            Some(entry) => entry.2 += 1,
            None => self.disagreements.push((domain, kind, 1)),
        }
    }

    fn flush(self) {
        for (domain, rule, outcome, n) in self.decisions {
            metrics::candidate_decision(domain, rule, outcome, n);
        }
        for (domain, kind, n) in self.disagreements {
            metrics::candidate_disagreement(domain, kind, n);
        }
    }
}
