//! Which rate limit headers the service sends, picked from a check's statuses and
//! rendered by `spillway_core::headers`; and the reference's
//! `LIMIT_RESPONSE_HEADERS_ENABLED` headers.

use spillway_core::headers::{self, Current, Quota, ceil_secs};

use crate::config::Headers;
use crate::service::request::{CheckResponse, Code, Status};

// The section is plain data in the configuration; how it renders lives here, beside
// the statuses it reads.
impl Headers {
    /// The reference's three headers (when enabled): taken from the descriptor with the
    /// lowest remaining among those with a limit; an over-limit descriptor always wins.
    pub fn reference_headers(&self, r: &CheckResponse) -> Vec<(&str, String)> {
        let (Some([limit, remaining, reset]), Some(s)) = (&self.reference, tightest(r)) else {
            return Vec::new();
        };
        vec![
            (limit.as_str(), quota(s).quota.to_string()),
            (remaining.as_str(), s.remaining.to_string()),
            (reset.as_str(), s.reset_seconds().to_string()),
        ]
    }

    /// `/v1/check`'s headers for a response (`Retry-After` on a denial included).
    pub fn http_headers(&self, r: &CheckResponse) -> Vec<(&'static str, String)> {
        let mut out = match tightest(r) {
            Some(s) => self.style.render(
                r.statuses.iter().filter(|s| s.rule.is_some()).map(quota),
                Current {
                    quota: quota(s),
                    remaining: s.remaining,
                    reset_secs: ceil_secs(s.retry_after.unwrap_or(s.reset_after)),
                },
            ),
            None => Vec::new(),
        };
        if r.overall == Code::OverLimit
            && let Some(wait) = retry_after(r)
        {
            out.push(headers::retry_after(wait));
        }
        out
    }
}

/// The status to report: an enforced denial first, else the lowest remaining.
fn tightest(r: &CheckResponse) -> Option<&Status> {
    let with_rule = r.statuses.iter().filter(|s| s.rule.is_some());
    headers::reported(with_rule, |s| (s.code == Code::OverLimit, s.remaining))
}

/// The longest wait until every denying descriptor would admit; `None` when a cost
/// can never fit (no retry helps).
fn retry_after(r: &CheckResponse) -> Option<std::time::Duration> {
    let mut longest = std::time::Duration::ZERO;
    for s in r.statuses.iter().filter(|s| s.code == Code::OverLimit) {
        longest = longest.max(s.retry_after?);
    }
    Some(longest)
}

/// A status's rule as the headers name it (callers pass statuses that have a rule).
fn quota(s: &Status) -> Quota<'_> {
    let rule = s
        .rule
        .as_ref()
        .expect("only statuses with a rule are reported");
    Quota {
        name: rule.name.as_deref().unwrap_or(&rule.path),
        quota: rule.requests_per_unit,
        window: rule.window,
    }
}
