//! One rule's decision as a descriptor status (with the reference's quirks: `remaining`
//! 0 when over, the window's end for rules that never reach the store), and which of a
//! descriptor's rules its status reports.

use std::sync::Arc;
use std::time::Duration;

use spillway_core::{Decision, Timestamp};
use spillway_policy::{Mode, Rule, RuleLimit};

use super::request::{Code, ReportedRule, Status};

/// Which rule a descriptor reports: a denial first, then a shadow denial, then the rule
/// closest to its limit (the reference and Envoy pick the lowest remaining).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    Denied,
    ShadowDenied,
    Limited,
    Unlimited,
    Nothing,
}

impl Rank {
    pub(crate) fn of(s: &Status) -> Rank {
        match (s.code, s.shadow_denied, &s.rule) {
            (Code::OverLimit, ..) => Rank::Denied,
            (_, true, _) => Rank::ShadowDenied,
            (_, _, Some(_)) => Rank::Limited,
            (_, _, None) => Rank::Unlimited,
        }
    }
}

/// One rule's status.
pub(crate) fn rule_status(
    rule: &Rule,
    decision: Option<(Decision, bool)>,
    now: Timestamp,
) -> Status {
    let shadow = rule.mode == Mode::Shadow;
    let reported = || ReportedRule {
        name: rule.name.clone(),
        path: Arc::clone(&rule.metric),
        requests_per_unit: rule.requests_per_unit,
        capacity: match &rule.limit {
            RuleLimit::Limited(l) => l.capacity(),
            _ => rule.requests_per_unit,
        },
        unit: rule.unit,
        window: rule.window().unwrap_or_default(),
        algorithm: match &rule.limit {
            RuleLimit::Limited(l) => l.algorithm().name(),
            _ => "fixed_window",
        },
        shadow,
    };
    let (allowed, remaining, reset_after, retry_after, degraded) = match (&rule.limit, decision) {
        (RuleLimit::Unlimited, _) => {
            return Status {
                remaining: u64::from(u32::MAX),
                ..Status::no_rule()
            };
        }
        (RuleLimit::BlockAll, _) | (RuleLimit::Limited(_), None) => {
            // Until the end of the current epoch-aligned window, as the reference says.
            let window = rule.window().map_or(1, |w| w.as_micros().max(1) as u64);
            let left = Duration::from_micros(window - now.as_micros() % window);
            (false, 0, left, Some(left), false)
        }
        (RuleLimit::Limited(limit), Some((d, degraded))) => {
            // A reference rule over its limit reports 0, as the reference's; a denial
            // charged anyway (`count_rejected`) leaves nothing to use either.
            let remaining = if rule.reference && !d.allowed() {
                0
            } else {
                d.usable(limit)
            };
            (
                d.allowed(),
                remaining,
                d.reset_after,
                d.retry_after(),
                degraded,
            )
        }
    };
    Status {
        code: if allowed || shadow {
            Code::Ok
        } else {
            Code::OverLimit
        },
        rule: Some(reported()),
        remaining,
        reset_after,
        retry_after: if allowed { None } else { retry_after },
        shadow_denied: shadow && !allowed,
        degraded,
        // A shadow rule's wait is only noted (its slot was reserved, as its charge is
        // made): the request does not wait for it.
        wait: match decision {
            Some((d, _)) if allowed && !shadow => d.wait,
            _ => Duration::ZERO,
        },
    }
}

/// How the reference combines a request's rules into one answer: over the limit when
/// an enforcing rule is, or when every quota-mode rule is (and never in global shadow
/// mode, which the caller applies). Shared by checks, explains and the candidate set.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    enforcing_over: bool,
    quota: usize,
    quota_over: usize,
}

impl Verdict {
    /// One rule: whether it is quota-mode, whether it is over its limit (shadow or
    /// not), and whether that over-limit is enforced.
    pub(crate) fn add(&mut self, quota: bool, over: bool, enforced: bool) {
        if quota {
            self.quota += 1;
            self.quota_over += usize::from(over);
        } else if over && enforced {
            self.enforcing_over = true;
        }
    }

    /// Whether an enforcing rule is over.
    pub(crate) fn enforcing_over(&self) -> bool {
        self.enforcing_over
    }

    /// Whether the request is over the limit.
    pub(crate) fn over(&self) -> bool {
        self.enforcing_over || (self.quota > 0 && self.quota_over == self.quota)
    }
}
