//! Limits as data (#63): an *override* sets the limits of one exact descriptor path of
//! a domain (`api_key=abc`), in the policy's own form (any algorithm, metered budgets
//! and calendar periods included), and is checked as strictly as a policy file,
//! because it is one: the loader reads the limits as a domain's.
//!
//! What the loader reads is the override's *plan*: its limits on a path of its keys
//! alone (`api_key`, no value), which matches any values of those keys and counts
//! each path apart, as a key-only descriptor of a policy file does. Every override of
//! the same keys and limits (every customer of one plan) shares one plan: a million
//! overrides cost a million paths, not a million compiled domains.

use std::path::Path;

use crate::{Domain, Rule};

/// The most entries an override's path may have (a request's descriptor may have 32).
pub const MAX_ENTRIES: usize = 32;

/// The longest key or value of an override's path, in bytes.
pub const MAX_ENTRY_LEN: usize = 256;

/// What is wrong with an override: the field (`entries[1].value`, `limits[0].window`)
/// and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverrideError {
    /// Where in the override: `entries[1].value`, `limits[0].window`.
    pub field: String,
    /// What is wrong, lowercase, without a trailing period.
    pub message: String,
}

impl std::fmt::Display for OverrideError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// One override, checked: its path, its limits (as canonical JSON) and its plan.
#[derive(Debug)]
pub struct Override {
    entries: Vec<(String, String)>,
    limits: String,
    /// The domain of the override's keys alone, as the loader read it.
    plan: Domain,
}

impl Override {
    /// The override of `domain`'s path `entries` setting `limits` (a list of limits in
    /// the policy's native form, as JSON). Refused, with every field at fault, when
    /// the path is refused ([`check_path`]) or the policy loader refuses the limits.
    pub fn compile(
        domain: &str,
        entries: &[(String, String)],
        limits: &serde_json::Value,
    ) -> Result<Override, Vec<OverrideError>> {
        check_path(entries)?;
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        let plan = plan(domain, &keys, limits)?;
        Ok(Override {
            entries: entries.to_vec(),
            limits: limits.to_string(),
            plan,
        })
    }

    /// Its plan: the domain of its keys alone, whose rules apply to its path.
    pub fn into_plan(self) -> Domain {
        self.plan
    }

    /// The path it sets.
    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }

    /// Its limits, as canonical JSON (objects' fields in order): equal limits, equal
    /// text, so a plan can be found by it.
    pub fn limits(&self) -> &str {
        &self.limits
    }

    /// The rules it sets, in the order given.
    pub fn rules(&self) -> &[Rule] {
        self.plan.resolve(&self.entries).map_or(&[], |m| m.rules)
    }
}

/// Whether `entries` may be an override's path: one entry or more, at most
/// [`MAX_ENTRIES`], keys not empty, keys and values at most [`MAX_ENTRY_LEN`] bytes,
/// and no value a pattern (ending in `*`: an override is for one exact path; a
/// pattern belongs in the policy file). Refused naming each entry at fault.
pub fn check_path(entries: &[(String, String)]) -> Result<(), Vec<OverrideError>> {
    let mut errors = Vec::new();
    let mut error = |field: String, message: &str| {
        errors.push(OverrideError {
            field,
            message: message.to_owned(),
        });
    };
    if entries.is_empty() {
        error(
            "entries".into(),
            "an override needs a path of one entry or more",
        );
    }
    if entries.len() > MAX_ENTRIES {
        error(
            "entries".into(),
            &format!("{} entries, the most is {MAX_ENTRIES}", entries.len()),
        );
    }
    for (i, (k, v)) in entries.iter().enumerate() {
        if k.is_empty() {
            error(format!("entries[{i}].key"), "empty");
        }
        if k.len() > MAX_ENTRY_LEN || v.len() > MAX_ENTRY_LEN {
            error(
                format!("entries[{i}]"),
                &format!("longer than {MAX_ENTRY_LEN} bytes"),
            );
        }
        if v.ends_with('*') {
            error(
                format!("entries[{i}].value"),
                "an override names one exact path, not a pattern (a value ending in `*` \
                 belongs in the policy file)",
            );
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The plan of `limits` over `keys` in `domain`: the domain holding the path of those
/// keys alone (no values) with `limits` at its end, as the policy loader reads it.
/// Refused naming the override's fields (`limits[0].window`).
pub fn plan(
    domain: &str,
    keys: &[&str],
    limits: &serde_json::Value,
) -> Result<Domain, Vec<OverrideError>> {
    if !limits.is_array() {
        return Err(vec![OverrideError {
            field: "limits".into(),
            message: "a list of limits, in the policy's native form".into(),
        }]);
    }
    let text = policy_text(domain, keys, limits);
    crate::parse(Path::new("override"), &text).map_err(|e| {
        e.iter()
            .map(|e| OverrideError {
                field: field_of(&e.field, keys.len()),
                message: e.message.clone(),
            })
            .collect()
    })
}

/// The policy file of `domain` holding the path of `keys` alone, with `limits` at its
/// end: JSON scalars and lists are YAML's flow form, so every key goes in as JSON,
/// quoted and escaped.
fn policy_text(domain: &str, keys: &[&str], limits: &serde_json::Value) -> String {
    let json = |s: &str| serde_json::Value::from(s).to_string();
    let mut text = format!("domain: {}\ndescriptors:\n", json(domain));
    for (depth, k) in keys.iter().enumerate() {
        let pad = "    ".repeat(depth);
        text.push_str(&format!("{pad}  - key: {}\n", json(k)));
        if depth + 1 < keys.len() {
            text.push_str(&format!("{pad}    descriptors:\n"));
        } else {
            text.push_str(&format!("{pad}    limits: {limits}\n"));
        }
    }
    text
}

/// A loader's field (`descriptors[0].descriptors[0].limits[1].window`) as the
/// override's (`limits[1].window`).
fn field_of(field: &str, depth: usize) -> String {
    let mut rest = field;
    for _ in 0..depth {
        match rest.strip_prefix("descriptors[0]") {
            Some(r) => rest = r.strip_prefix('.').unwrap_or(r),
            None => break,
        }
    }
    if rest.is_empty() {
        "limits".into()
    } else {
        rest.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_override_sets_its_paths_limits_in_the_policys_form() {
        let limits = json!([
            { "name": "per-minute", "algorithm": "gcra", "limit": 1000, "window": "1m" },
            { "name": "tokens", "algorithm": "fixed_window", "limit": 2000000,
              "period": "month", "metered": true }
        ]);
        let o = Override::compile("llm", &path(&[("org", "acme"), ("api_key", "k1")]), &limits)
            .unwrap();
        let rules = o.rules();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].name.as_deref(), Some("per-minute"));
        assert_eq!(rules[0].requests_per_unit, 1000);
        assert!(rules[1].metered);
        // The plan's: one metric for every customer of it, not a series per key.
        assert_eq!(&*rules[0].metric, "org.api_key");
    }

    #[test]
    fn a_bad_override_is_refused_naming_the_field() {
        let p = path(&[("api_key", "k1")]);
        let bad = json!([{ "algorithm": "gcra", "limit": 10, "window": "soon" }]);
        let e = Override::compile("api", &p, &bad).unwrap_err();
        assert_eq!(e[0].field, "limits[0].window", "{e:?}");
        let unknown = json!([{ "algorithm": "gcra", "limit": 10, "window": "1s", "bogus": 1 }]);
        let e = Override::compile("api", &p, &unknown).unwrap_err();
        assert!(e[0].field.starts_with("limits"), "{e:?}");
        let e = Override::compile("api", &p, &json!({ "limit": 1 })).unwrap_err();
        assert_eq!(e[0].field, "limits");
        let e = Override::compile("api", &p, &json!([])).unwrap_err();
        assert!(e[0].message.contains("empty"), "{e:?}");
    }

    #[test]
    fn a_path_must_be_exact_short_and_not_empty() {
        let limits = json!([{ "algorithm": "gcra", "limit": 10, "window": "1s" }]);
        let e = Override::compile("api", &[], &limits).unwrap_err();
        assert_eq!(e[0].field, "entries");
        let e = Override::compile("api", &path(&[("api_key", "k*")]), &limits).unwrap_err();
        assert_eq!(e[0].field, "entries[0].value");
        let long = "x".repeat(MAX_ENTRY_LEN + 1);
        let e = Override::compile("api", &path(&[("api_key", &long)]), &limits).unwrap_err();
        assert_eq!(e[0].field, "entries[0]");
        let deep: Vec<(String, String)> = (0..=MAX_ENTRIES)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        assert!(Override::compile("api", &deep, &limits).is_err());
    }

    /// Values reach the loader as JSON strings: quotes, colons, newlines and YAML's
    /// own syntax stay values.
    #[test]
    fn odd_values_stay_values() {
        let limits = json!([{ "algorithm": "gcra", "limit": 10, "window": "1s" }]);
        for value in [
            "a: b",
            "\"quoted\"",
            "line\nbreak",
            "{ limits: [] }",
            "- x",
            "#",
        ] {
            let p = path(&[("api_key", value)]);
            let o = Override::compile("api", &p, &limits).unwrap();
            assert_eq!(o.rules().len(), 1, "{value:?}");
            assert_eq!(o.entries()[0].1, value);
        }
    }
}
