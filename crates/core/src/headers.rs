//! Rate limit response headers, as text: the IETF httpapi draft's `RateLimit-Policy`
//! and `RateLimit` (draft -10, structured fields, named policies), the older
//! three-header forms, and `Retry-After`. Plain `(name, value)` strings, so the service
//! and the tower layer render them the same way without core knowing any HTTP types.

use std::fmt::Write as _;
use std::str::FromStr;
use std::time::Duration;

/// Which rate limit headers a response carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderStyle {
    /// `RateLimit-Policy` + `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10).
    #[default]
    Ietf,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (drafts -00 to -06).
    Legacy,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (de facto).
    XRateLimit,
    /// None (`Retry-After` is still sent on a denial).
    None,
}

impl FromStr for HeaderStyle {
    type Err = String;

    /// Parses `ietf`, `legacy`, `x-ratelimit` or `none`, in any case.
    fn from_str(s: &str) -> Result<HeaderStyle, String> {
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

/// One limit that applied to a request, as the headers describe it.
#[derive(Clone, Copy, Debug)]
pub struct Quota<'a> {
    /// The policy's name (`RateLimit-Policy` names each policy; `RateLimit` says which
    /// one it reports).
    pub name: &'a str,
    /// Units the policy admits per window (`q`).
    pub quota: u64,
    /// The policy's window (`w`, whole seconds; omitted when it has none).
    pub window: Duration,
}

/// Which of several limits the headers report: a denying one first, then the one with
/// the least room left (the first of equals). `key` says of each whether it denied and
/// how much room it has. The service and the tower layer both choose with this.
///
/// ```
/// use spillway_core::headers::reported;
///
/// let limits = [(false, 5), (true, 0), (false, 1)];
/// assert_eq!(reported(limits.iter().enumerate(), |(_, l)| **l).map(|(i, _)| i), Some(1));
/// assert_eq!(reported([(false, 5), (false, 1)], |l| *l), Some((false, 1)));
/// ```
pub fn reported<T>(
    limits: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> (bool, u64),
) -> Option<T> {
    limits.into_iter().min_by_key(|l| {
        let (denied, remaining) = key(l);
        (!denied, remaining)
    })
}

/// The limit the client is closest to, as the headers report it.
#[derive(Clone, Copy, Debug)]
pub struct Current<'a> {
    /// Which limit: its name and quota.
    pub quota: Quota<'a>,
    /// Units still admitted (`r`).
    pub remaining: u64,
    /// Seconds until the client should expect room again (`t`).
    pub reset_secs: u64,
}

impl HeaderStyle {
    /// The IETF style's `RateLimit-Policy` value for `policies` (`None` in the other
    /// styles): it depends on the limits only, so it can be written once.
    pub fn ietf_policy<'a>(self, policies: impl IntoIterator<Item = Quota<'a>>) -> Option<String> {
        (self == HeaderStyle::Ietf).then(|| policy_list(policies))
    }

    /// The headers for a response: `policies` are every limit that applied (a name
    /// repeated is listed once), `current` the one closest to denying.
    pub fn render<'a>(
        self,
        policies: impl IntoIterator<Item = Quota<'a>>,
        current: Current<'_>,
    ) -> Vec<(&'static str, String)> {
        let Current {
            quota,
            remaining,
            reset_secs,
        } = current;
        let mut out = Vec::with_capacity(3);
        let [limit_name, remaining_name, reset_name] = match self {
            HeaderStyle::None => return out,
            HeaderStyle::Ietf => {
                out.push(("ratelimit-policy", policy_list(policies)));
                out.push(("ratelimit", ietf_item(quota.name, remaining, reset_secs)));
                return out;
            }
            HeaderStyle::Legacy => ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"],
            HeaderStyle::XRateLimit => [
                "x-ratelimit-limit",
                "x-ratelimit-remaining",
                "x-ratelimit-reset",
            ],
        };
        out.push((limit_name, quota.quota.to_string()));
        out.push((remaining_name, remaining.to_string()));
        out.push((reset_name, reset_secs.to_string()));
        out
    }
}

/// The IETF style's `RateLimit` value for the limit named `name`: `"name";r=R;t=T`.
/// With [`HeaderStyle::ietf_policy`], what [`HeaderStyle::render`] writes, for callers
/// that keep the policy list (the same on every response) from one response to the
/// next.
pub fn ietf_item(name: &str, remaining: u64, reset_secs: u64) -> String {
    // Sized once: the quotes, `;r=`, `;t=` and two numbers of up to 20 digits.
    let mut item = String::with_capacity(name.len() + 48);
    sf_string(&mut item, name);
    let _ = write!(item, ";r={remaining};t={reset_secs}");
    item
}

/// `Retry-After`'s value: whole seconds, rounded up so a client that waits exactly
/// that long is admitted.
pub fn retry_after(wait: Duration) -> (&'static str, String) {
    ("retry-after", ceil_secs(wait).to_string())
}

/// Whole seconds, rounded up.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `RateLimit-Policy`: every policy, once, as `"name";q=N;w=S`.
fn policy_list<'a>(policies: impl IntoIterator<Item = Quota<'a>>) -> String {
    let mut out = String::new();
    let mut seen: Vec<&str> = Vec::new();
    for p in policies {
        if seen.contains(&p.name) {
            continue;
        }
        seen.push(p.name);
        if !out.is_empty() {
            out.push_str(", ");
        }
        sf_string(&mut out, p.name);
        let _ = write!(out, ";q={}", p.quota);
        // `w` is whole seconds; a sub-second window has no way to say itself here.
        if p.window.subsec_nanos() == 0 && p.window.as_secs() > 0 {
            let _ = write!(out, ";w={}", p.window.as_secs());
        }
    }
    out
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

    const DAY: Quota<'static> = Quota {
        name: "day",
        quota: 1000,
        window: Duration::from_secs(86_400),
    };
    const BURST: Quota<'static> = Quota {
        name: "burst",
        quota: 10,
        window: Duration::from_millis(1500),
    };

    #[test]
    fn sf_strings_escape_and_stay_ascii() {
        let mut s = String::new();
        sf_string(&mut s, r#"a"b\c é"#);
        assert_eq!(s, r#""a\"b\\c _""#);
    }

    #[test]
    fn ietf_lists_each_policy_once_and_reports_the_current_one() {
        let current = Current {
            quota: BURST,
            remaining: 3,
            reset_secs: 2,
        };
        let h = HeaderStyle::Ietf.render([DAY, BURST, DAY], current);
        assert_eq!(
            h,
            [
                (
                    "ratelimit-policy",
                    r#""day";q=1000;w=86400, "burst";q=10"#.to_string()
                ),
                ("ratelimit", r#""burst";r=3;t=2"#.to_string()),
            ]
        );
    }

    #[test]
    fn older_styles_are_three_headers_and_none_is_none() {
        let current = Current {
            quota: DAY,
            remaining: 7,
            reset_secs: 60,
        };
        let names = |style: HeaderStyle| -> Vec<_> {
            style
                .render([DAY], current)
                .into_iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect()
        };
        assert_eq!(
            names(HeaderStyle::Legacy),
            [
                "ratelimit-limit=1000",
                "ratelimit-remaining=7",
                "ratelimit-reset=60"
            ]
        );
        assert_eq!(names(HeaderStyle::XRateLimit)[0], "x-ratelimit-limit=1000");
        assert!(names(HeaderStyle::None).is_empty());
        assert_eq!("X-RateLimit".parse(), Ok(HeaderStyle::XRateLimit));
        assert!("bogus".parse::<HeaderStyle>().is_err());
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after(Duration::from_millis(1)).1, "1");
        assert_eq!(retry_after(Duration::from_secs(2)).1, "2");
        assert_eq!(retry_after(Duration::ZERO).1, "0");
    }
}
