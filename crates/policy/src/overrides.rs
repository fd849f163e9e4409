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

/// The most limits one override sets (a path is a customer; a plan of more limits
/// belongs in the policy file).
pub const MAX_LIMITS: usize = 16;

/// The most lines one bulk import holds (a file of more is sent in parts:
/// `spillway limits import` does).
pub const BULK_MAX_LINES: usize = 100_000;

/// The most errors a bulk file's check reports (the rest are counted).
const BULK_MAX_ERRORS: usize = 100;

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
        return Err(errors);
    }
    for (i, (k, v)) in entries.iter().enumerate() {
        if k.is_empty() {
            error(format!("entries[{i}].key"), "empty");
        }
        if k.contains('=') {
            error(
                format!("entries[{i}].key"),
                "holds `=`, which names no descriptor key an override can address",
            );
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

/// One line of a bulk file: a path and its limits, checked.
#[derive(Debug)]
pub struct BulkLine {
    /// Its line in the file, from 1.
    pub line: usize,
    /// The path.
    pub entries: Vec<(String, String)>,
    /// The limits, in the policy's native form.
    pub limits: serde_json::Value,
}

/// A bulk file's line as written: `{"entries": [{"key": …, "value": …}], "limits": […]}`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    entries: Vec<WrittenEntry>,
    limits: serde_json::Value,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenEntry {
    key: String,
    value: String,
}

/// A bulk file of `domain`'s overrides (NDJSON: one override a line, as `PUT
/// /v1/limits/{domain}` takes it; blank lines passed over), each checked as
/// [`Override::compile`] checks one, at most [`BULK_MAX_LINES`], no path twice.
/// Refused whole, naming each line at fault (`line 3: limits[0].window`), the first
/// hundred of them. Overrides of the same keys and limits are compiled once.
pub fn bulk(domain: &str, text: &str) -> Result<Vec<BulkLine>, Vec<OverrideError>> {
    bulk_at(domain, text, 1).map_err(|errors| {
        errors
            .into_iter()
            .map(|(line, e)| OverrideError {
                field: format!("line {line}: {}", e.field),
                message: e.message,
            })
            .collect()
    })
}

/// [`bulk`] of a part of a file whose first line is `first`: each fault with its line
/// in the file.
pub fn bulk_at(
    domain: &str,
    text: &str,
    first: usize,
) -> Result<Vec<BulkLine>, Vec<(usize, OverrideError)>> {
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    let mut refused = 0usize;
    let mut unlisted = 0usize;
    let mut fault = |line: usize, found: Vec<OverrideError>| {
        refused += 1;
        for e in found {
            if errors.len() < BULK_MAX_ERRORS {
                errors.push((line, e));
            } else {
                unlisted += 1;
            }
        }
    };
    let mut compiled: std::collections::HashSet<(Vec<String>, String)> = Default::default();
    let mut seen: std::collections::HashMap<Vec<(String, String)>, usize> = Default::default();
    let mut overrides = 0usize;
    for (i, text) in text.lines().enumerate() {
        let line = first + i;
        if text.trim().is_empty() {
            continue;
        }
        overrides += 1;
        if overrides > BULK_MAX_LINES {
            fault(
                line,
                vec![OverrideError {
                    field: "file".into(),
                    message: format!(
                        "more than {BULK_MAX_LINES} overrides: send the rest apart \
                         (`spillway limits import` does)"
                    ),
                }],
            );
            break;
        }
        let written: Written = match serde_json::from_str(text) {
            Ok(w) => w,
            Err(e) => {
                fault(
                    line,
                    vec![OverrideError {
                        field: "line".into(),
                        message: format!(
                            "{e} (expected {{\"entries\": [{{\"key\": …, \"value\": …}}], \"limits\": [ … ]}})"
                        ),
                    }],
                );
                continue;
            }
        };
        let entries: Vec<(String, String)> = written
            .entries
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect();
        if let Err(e) = check_path(&entries) {
            fault(line, e);
            continue;
        }
        let keys: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
        let text = written.limits.to_string();
        if !compiled.contains(&(keys.clone(), text.clone())) {
            let keys_ref: Vec<&str> = keys.iter().map(String::as_str).collect();
            if let Err(e) = plan(domain, &keys_ref, &written.limits) {
                fault(line, e);
                continue;
            }
            compiled.insert((keys, text));
        }
        if let Some(first) = seen.insert(entries.clone(), line) {
            fault(
                line,
                vec![OverrideError {
                    field: "entries".into(),
                    message: format!("the same path as line {first}: one override a path"),
                }],
            );
            continue;
        }
        lines.push(BulkLine {
            line,
            entries,
            limits: written.limits,
        });
    }
    if refused > 0 {
        if unlisted > 0 {
            let last = errors.last().map_or(first, |(l, _)| *l);
            errors.push((
                last,
                OverrideError {
                    field: "file".into(),
                    message: format!(
                        "{refused} lines refused in all; the first {BULK_MAX_ERRORS} faults listed"
                    ),
                },
            ));
        }
        return Err(errors);
    }
    Ok(lines)
}

/// The plan of `limits` over `keys` in `domain`: the domain holding the path of those
/// keys alone (no values) with `limits` at its end, as the policy loader reads it.
/// Refused naming the override's fields (`limits[0].window`).
pub fn plan(
    domain: &str,
    keys: &[&str],
    limits: &serde_json::Value,
) -> Result<Domain, Vec<OverrideError>> {
    let Some(list) = limits.as_array() else {
        return Err(vec![OverrideError {
            field: "limits".into(),
            message: "a list of limits, in the policy's native form".into(),
        }]);
    };
    if list.len() > MAX_LIMITS {
        return Err(vec![OverrideError {
            field: "limits".into(),
            message: format!("{} limits, the most is {MAX_LIMITS}", list.len()),
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

    #[test]
    fn too_many_limits_or_entries_are_refused_at_once() {
        let one = json!({ "algorithm": "gcra", "limit": 10, "window": "1s" });
        let many = serde_json::Value::Array(vec![one; 10_000]);
        let e = Override::compile("api", &path(&[("api_key", "k")]), &many).unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].field, "limits");
        assert!(e[0].message.contains("10000 limits"), "{e:?}");
        let limits = json!([{ "algorithm": "gcra", "limit": 10, "window": "1s" }]);
        let deep: Vec<(String, String)> =
            (0..10_000).map(|i| (format!("k{i}"), "v".into())).collect();
        let e = Override::compile("api", &deep, &limits).unwrap_err();
        assert_eq!(e.len(), 1, "one error, not one an entry: {}", e.len());
        let e = Override::compile("api", &path(&[("a=b", "v")]), &limits).unwrap_err();
        assert_eq!(e[0].field, "entries[0].key");
    }

    #[test]
    fn a_bulk_file_is_checked_whole_naming_each_line() {
        let good = |k: &str| {
            json!({ "entries": [{ "key": "api_key", "value": k }],
                    "limits": [{ "algorithm": "gcra", "limit": 10, "window": "1s" }] })
            .to_string()
        };
        let text = format!("{}\n\n{}\n", good("a"), good("b"));
        let lines = bulk("api", &text).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].line, lines[1].line), (1, 3));
        assert_eq!(lines[1].entries, path(&[("api_key", "b")]));

        let bad_window = r#"{"entries":[{"key":"api_key","value":"c"}],"limits":[{"algorithm":"gcra","limit":10,"window":"soon"}]}"#;
        let text = [good("a"), "not json".into(), bad_window.into(), good("a")].join("\n");
        let e = bulk("api", &text).unwrap_err();
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "line 2: line",
                "line 3: limits[0].window",
                "line 4: entries"
            ],
            "{e:?}"
        );
        assert!(e[2].message.contains("line 1"), "{e:?}");

        // Many bad lines: the first hundred faults, and how many lines in all.
        let text = vec!["{}"; 500].join("\n");
        let e = bulk("api", &text).unwrap_err();
        assert_eq!(e.len(), BULK_MAX_ERRORS + 1);
        assert!(
            e.last().unwrap().message.starts_with("500 lines refused"),
            "{e:?}"
        );

        let text = (0..=BULK_MAX_LINES)
            .map(|i| good(&format!("k{i}")))
            .collect::<Vec<_>>()
            .join("\n");
        let e = bulk("api", &text).unwrap_err();
        assert_eq!(e[0].field, format!("line {}: file", BULK_MAX_LINES + 1));
    }
}
