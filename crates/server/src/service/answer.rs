//! The answer stage: a check's answer from its decisions: each descriptor's status and the overall
//! code as the reference combines them, the metadata of passing rules, and the
//! metrics and top keys each decision feeds.

use std::sync::Arc;

use spillway_core::Timestamp;
use spillway_policy::{Metadata, RuleLimit};

use crate::metrics;

use super::request::{CheckResponse, Code, Status, Valid};
use super::status::{Rank, Verdict, rule_status};
use super::{Check, Decided, Hit, Service, minute};

impl Service {
    /// The answer stage: statuses per descriptor and the overall code, as the reference
    /// combines them.
    pub(super) fn answer(
        &self,
        req: &Valid,
        domain: &Arc<str>,
        check: &Check<'_>,
        decided: &[Decided],
    ) -> CheckResponse {
        let (hits, now) = (&check.hits, check.now);
        let mut statuses = vec![Status::no_rule(); req.descriptors.len()];
        let mut ranks = vec![Rank::Nothing; req.descriptors.len()];
        let mut waits = vec![std::time::Duration::ZERO; req.descriptors.len()];
        let mut verdict = Verdict::default();
        let mut next = decided.iter().peekable();
        // A place kept in a queue: for how long, and whether every denial keeps one.
        let (mut queued, mut waitable) = (None::<std::time::Duration>, true);

        for (i, hit) in hits.iter().enumerate() {
            let decided = next.next_if(|d| d.hit == i);
            let decision = decided.map(|d| (d.decision, d.degraded));
            let status = rule_status(&hit.rule, decision, now);
            let over = status.code == Code::OverLimit || status.shadow_denied;
            // A status is OVER_LIMIT only for an enforcing rule.
            verdict.add(
                self.is_quota(&hit.rule),
                over,
                status.code == Code::OverLimit,
            );
            match (decided, &hit.rule.limit) {
                (Some(d), RuleLimit::Limited(l)) if d.decision.queued => {
                    let wait = l.max_wait();
                    queued = Some(queued.map_or(wait, |q| q.min(wait)));
                }
                _ if status.code == Code::OverLimit => waitable = false,
                _ => {}
            }
            // A take waiting in a queue is counted once, when it is admitted or
            // refused; each try before is not a decision.
            let trying = decided.is_some_and(|d| d.decision.queued);
            if let Some(d) = decided
                && let Some(reached) = d.reached
            {
                self.alert(req, domain, hit, d, reached, now);
            }
            if !trying {
                self.record(domain, hit, &status, decided, now);
            }
            if over
                && !trying
                && let Some(key) = &hit.key
            {
                let name = hit.rule.name.as_ref().unwrap_or(&hit.rule.metric);
                self.top
                    .record(domain, &hit.rule.metric, name, key.as_str(), minute(now));
            }

            let rank = Rank::of(&status);
            let slot = hit.descriptor;
            waits[slot] = waits[slot].max(status.wait);
            if (rank, status.remaining) < (ranks[slot], statuses[slot].remaining) {
                ranks[slot] = rank;
                statuses[slot] = status;
            }
        }

        for (status, wait) in statuses.iter_mut().zip(waits) {
            status.wait = wait;
        }
        let overall = if verdict.over() && !self.options.global_shadow {
            Code::OverLimit
        } else {
            if verdict.over() {
                self.stats.global_shadow();
            }
            Code::Ok
        };
        let metadata = self
            .options
            .dynamic_metadata
            .then(|| passing_metadata(hits, &statuses));
        // Over the limit, or in global shadow mode (nothing enforced): no wait.
        let wait = match overall {
            Code::Ok if !self.options.global_shadow => {
                statuses.iter().map(|s| s.wait).max().unwrap_or_default()
            }
            _ => std::time::Duration::ZERO,
        };
        CheckResponse {
            waitable: waitable && overall == Code::OverLimit,
            overall,
            statuses,
            metadata,
            wait,
            queued,
        }
    }

    pub(super) fn record(
        &self,
        domain: &Arc<str>,
        hit: &Hit<'_>,
        status: &Status,
        decided: Option<&Decided>,
        now: Timestamp,
    ) {
        if matches!(hit.rule.limit, RuleLimit::Unlimited) {
            return; // the reference keeps no stats for unlimited rules
        }
        let decision = decided.map(|d| d.decision);
        if hit.rule.holds() {
            note_holds(domain, hit, decided, now);
            if hit.refund.is_some() {
                // A hold given back decides nothing.
                return metrics::released(domain, &hit.rule);
            }
        }
        let outcome = match (status.code, status.shadow_denied) {
            (Code::OverLimit, _) => metrics::Outcome::OverLimit,
            (Code::Ok, true) => metrics::Outcome::ShadowOverLimit,
            (Code::Ok, false) => metrics::Outcome::Ok,
        };
        metrics::decision(domain, &hit.rule, outcome);
        if hit.rule.shares()
            && let (Some(d), Some(member)) = (decision, &hit.member)
        {
            metrics::share(domain, &hit.rule, member, &d);
        }
        if let Some(d) = decision.filter(|d| d.allowed()) {
            let near = (d.limit as f64 * self.options.near_limit_ratio).floor() as u64;
            if d.limit - d.remaining >= near.max(1) {
                metrics::near_limit(domain, &hit.rule);
            }
        }
        if self.stats.on() {
            // A block-all rule (limit 0) refuses every hit. A decision its failure
            // policy made (`local`, `open`) counts as the store's would; a rule with no
            // decision at all is in no stat.
            let (limit, remaining, allowed) = match (&hit.rule.limit, decision) {
                (RuleLimit::BlockAll, _) => (0, 0, false),
                (_, Some(d)) => (d.limit, d.remaining, d.allowed()),
                (_, None) => return,
            };
            let shadow = hit.rule.mode == spillway_policy::Mode::Shadow;
            let hits = crate::stats::hits(
                limit,
                remaining,
                allowed,
                hit.cost,
                self.options.near_limit_ratio,
                shadow,
            );
            self.stats.rule(domain, &hit.rule, hits);
        }
    }
}

impl Service {
    /// The budget alerts a charge of `hit` reached first in its window, one event each.
    fn alert(
        &self,
        req: &Valid,
        domain: &Arc<str>,
        hit: &Hit<'_>,
        d: &Decided,
        (from, to, used): (u8, u8, u64),
        now: Timestamp,
    ) {
        let RuleLimit::Limited(limit) = &hit.rule.limit else {
            return;
        };
        let thresholds = limit
            .alert_at()
            .get(usize::from(from)..usize::from(to))
            .unwrap_or_default();
        let end = now.saturating_add(d.decision.reset_after).as_micros() / 1000;
        for &t in thresholds {
            self.alerts.send(crate::alerts::Event {
                domain: domain.to_string(),
                path: super::overrides::path_text(&req.descriptors[hit.descriptor].entries),
                limit: hit.rule.display_name().to_owned(),
                threshold: f64::from(t) / 1000.0,
                used,
                budget: limit.limit(),
                period_end_ms: end,
            });
        }
    }
}

/// What a `concurrency` rule's decision says of its holds: those found lapsed, and
/// (the store's word, not a failure policy's) how many its key has in use, until when.
fn note_holds(domain: &Arc<str>, hit: &Hit<'_>, decided: Option<&Decided>, now: Timestamp) {
    let Some(d) = decided else { return };
    if d.lapsed > 0 {
        metrics::lapsed(domain, &hit.rule, d.lapsed);
    }
    if let (Some(key), false) = (&hit.key, d.degraded) {
        let until = now.saturating_add(d.decision.reset_after).as_micros();
        let holds = d.decision.limit - d.decision.remaining;
        hit.rule.counters.in_use.note(key.as_str(), holds, until);
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
