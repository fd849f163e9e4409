//! Rate limit response headers: the IETF httpapi draft's `RateLimit-Policy` and
//! `RateLimit` (draft -10, structured fields, named policies), the older three-header
//! forms, `Retry-After`, and the reference's `LIMIT_RESPONSE_HEADERS_ENABLED` headers.

use std::fmt::Write as _;

use crate::request::{CheckResponse, Code, Status, ceil_secs};

/// Which rate limit headers `/v1/check` sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderStyle {
    /// `RateLimit-Policy` + `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
    #[default]
    Ietf,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (drafts -00 to -06).
    Legacy,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (de facto).
    XRateLimit,
    /// None (`Retry-After` is still sent on 429).
    None,
}

impl HeaderStyle {
    /// Parses `ietf`, `legacy`, `x-ratelimit` or `none`.
    pub fn parse(s: &str) -> Result<HeaderStyle, String> {
        match s.to_ascii_lowercase().as_str() {
            "ietf" => Ok(HeaderStyle::Ietf),
            "legacy" => Ok(HeaderStyle::Legacy),
            "x-ratelimit" => Ok(HeaderStyle::XRateLimit),
            "none" => Ok(HeaderStyle::None),
            other => Err(format!(
                "unknown header style `{other}` (expected ietf, legacy, x-ratelimit or none)"
            )),
        }
    }
}

/// Header settings.
#[derive(Clone, Debug)]
pub struct HeaderOptions {
    /// `/v1/check`'s headers.
    pub style: HeaderStyle,
    /// The reference's `LIMIT_RESPONSE_HEADERS_ENABLED`: `response_headers_to_add` in
    /// gRPC and `/json` answers, with the header names it configures.
    pub reference: Option<[String; 3]>,
}

impl Default for HeaderOptions {
    fn default() -> HeaderOptions {
        HeaderOptions {
            style: HeaderStyle::Ietf,
            reference: None,
        }
    }
}

impl HeaderOptions {
    /// The reference's three headers (when enabled): taken from the descriptor with the
    /// lowest remaining among those with a limit; an over-limit descriptor always wins.
    pub fn reference_headers(&self, r: &CheckResponse) -> Vec<(&str, String)> {
        let (Some([limit, remaining, reset]), Some(s)) = (&self.reference, tightest(r)) else {
            return Vec::new();
        };
        let rule = s
            .rule
            .as_ref()
            .expect("tightest only picks statuses with a rule");
        vec![
            (limit.as_str(), rule.requests_per_unit.to_string()),
            (remaining.as_str(), s.remaining.to_string()),
            (reset.as_str(), s.reset_seconds().to_string()),
        ]
    }

    /// `/v1/check`'s headers for a response (`Retry-After` on a denial included).
    pub fn http_headers(&self, r: &CheckResponse) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(s) = tightest(r) {
            let rule = s
                .rule
                .as_ref()
                .expect("tightest only picks statuses with a rule");
            let t = ceil_secs(s.retry_after.unwrap_or(s.reset_after));
            match self.style {
                HeaderStyle::Ietf => {
                    out.push(("ratelimit-policy", policies(r)));
                    let mut item = String::new();
                    sf_string(&mut item, rule_name(s));
                    let _ = write!(item, ";r={};t={t}", s.remaining);
                    out.push(("ratelimit", item));
                }
                HeaderStyle::Legacy | HeaderStyle::XRateLimit => {
                    let x = self.style == HeaderStyle::XRateLimit;
                    out.push((
                        if x {
                            "x-ratelimit-limit"
                        } else {
                            "ratelimit-limit"
                        },
                        rule.requests_per_unit.to_string(),
                    ));
                    out.push((
                        if x {
                            "x-ratelimit-remaining"
                        } else {
                            "ratelimit-remaining"
                        },
                        s.remaining.to_string(),
                    ));
                    out.push((
                        if x {
                            "x-ratelimit-reset"
                        } else {
                            "ratelimit-reset"
                        },
                        t.to_string(),
                    ));
                }
                HeaderStyle::None => {}
            }
        }
        if r.overall == Code::OverLimit
            && let Some(retry) = retry_after(r)
        {
            out.push(("retry-after", retry.to_string()));
        }
        out
    }
}

/// The status to report: an enforced denial first, else the lowest remaining.
fn tightest(r: &CheckResponse) -> Option<&Status> {
    r.statuses
        .iter()
        .filter(|s| s.rule.is_some())
        .min_by_key(|s| (s.code != Code::OverLimit, s.remaining))
}

/// Seconds until every denying descriptor would admit, rounded up; `None` when a
/// cost can never fit (no retry helps).
fn retry_after(r: &CheckResponse) -> Option<u64> {
    let mut longest = 0;
    for s in r.statuses.iter().filter(|s| s.code == Code::OverLimit) {
        longest = longest.max(ceil_secs(s.retry_after?));
    }
    Some(longest)
}

/// `RateLimit-Policy`: every rule that applied, once, as `"name";q=N;w=S`.
fn policies(r: &CheckResponse) -> String {
    let mut out = String::new();
    let mut seen: Vec<&str> = Vec::new();
    for s in &r.statuses {
        let Some(rule) = &s.rule else { continue };
        let name = rule_name(s);
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        if !out.is_empty() {
            out.push_str(", ");
        }
        sf_string(&mut out, name);
        let _ = write!(out, ";q={}", rule.requests_per_unit);
        // `w` is whole seconds; a sub-second window has no way to say itself here.
        if rule.window.subsec_nanos() == 0 && rule.window.as_secs() > 0 {
            let _ = write!(out, ";w={}", rule.window.as_secs());
        }
    }
    out
}

fn rule_name(s: &Status) -> &str {
    s.rule
        .as_ref()
        .map_or("", |r| r.name.as_deref().unwrap_or(&r.path))
}

/// An RFC 9651 String: printable ASCII, with `"` and `\` escaped; anything else (which
/// a String cannot hold) becomes `_`.
fn sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sf_strings_escape_and_stay_ascii() {
        let mut s = String::new();
        sf_string(&mut s, r#"a"b\c é"#);
        assert_eq!(s, r#""a\"b\\c _""#);
    }
}
