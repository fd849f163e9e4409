//! The one sentence `check` answers in, whichever way it asked: a store, or a service
//! over gRPC or HTTP.

use std::time::Duration;

use spillway_policy::duration;

/// One answer of `check`, whichever way it asked (a store, or a service over gRPC or
/// HTTP), as the one sentence both print.
///
/// "Remaining" is defined once, in the core (`Decision::remaining`): the units that
/// would still be admitted right now, never more than the rule's capacity — its limit,
/// or for `token_bucket` and `gcra` its burst. The sentence says "R of C remaining"
/// against that capacity, never against the rate: a `gcra` of 10 a second with burst 20
/// holds 20. Over gRPC, Envoy's answer carries the rate but not the burst, so there the
/// sentence says "R remaining (10 per second)".
pub(crate) struct Answer<'a> {
    /// The key (store) or the descriptor's entries (service).
    pub subject: &'a str,
    pub verdict: Verdict,
    /// Cost 0: a look, which charges nothing.
    pub peek: bool,
    pub cost: u64,
    /// The cost was usage charged in full: the verdict says whether the limit owes.
    pub usage: bool,
    /// The rule's name (service).
    pub rule: Option<&'a str>,
    pub remaining: u64,
    /// The most `remaining` can be, when known.
    pub capacity: Option<u64>,
    /// The rule's rate as Envoy states it ("10 per second"), from a service.
    pub rate: Option<String>,
    pub reset_after_ms: Option<u64>,
}

pub(crate) enum Verdict {
    Allowed,
    Denied {
        retry_after_ms: Option<u64>,
    },
    CostExceedsCapacity,
    /// No rule applies (a service's answer).
    NoLimit,
}

impl Answer<'_> {
    pub(crate) fn sentence(&self) -> String {
        let subject = self.subject;
        let by = self.rule.map(|r| format!(" by `{r}`")).unwrap_or_default();
        let verdict = match &self.verdict {
            Verdict::NoLimit => return format!("{subject}: allowed; no limit applies"),
            Verdict::CostExceedsCapacity => {
                let capacity = self.capacity.map(|c| format!(" {c}")).unwrap_or_default();
                return format!(
                    "{subject}: denied for good{by}: cost {} is more than the capacity{capacity}",
                    self.cost
                );
            }
            Verdict::Allowed if self.usage => format!("charged {} used{by}", self.cost),
            Verdict::Denied {
                retry_after_ms: Some(retry),
            } if self.usage => format!(
                "charged {} used{by}, in debt: paid back in {}",
                self.cost,
                format_ms(*retry)
            ),
            Verdict::Allowed if self.peek => format!("would be allowed{by}"),
            Verdict::Allowed => format!("allowed{by}"),
            Verdict::Denied {
                retry_after_ms: Some(retry),
            } => format!("denied{by}, retry in {}", format_ms(*retry)),
            Verdict::Denied {
                retry_after_ms: None,
            } => format!("denied{by}"),
        };
        let mut state = match self.capacity {
            Some(c) => format!("{} of {c} remaining", self.remaining),
            None => format!("{} remaining", self.remaining),
        };
        if let Some(rate) = &self.rate {
            state.push_str(&format!(" ({rate})"));
        }
        if let Some(reset) = self.reset_after_ms {
            state.push_str(&format!(", full again in {}", format_ms(reset)));
        }
        format!("{subject}: {verdict}; {state}")
    }
}

fn format_ms(ms: u64) -> String {
    duration::format(Duration::from_millis(ms))
}
