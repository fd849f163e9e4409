//! Stage two: a parsed file ([`raw`]) becomes a checked [`Domain`], or every mistake
//! in it, each with its line and field. The reference's load errors, plus Spillway's.

use serde_saphyr::Spanned;
use std::path::Path;
use std::sync::Arc;

use crate::raw;

mod native;
use crate::rule::{Rule, RuleLimit};
use crate::set::{Domain, Level, Node};
use crate::{Error, Unit};
use native::native_limit;
use spillway_core::{Mode, OnStoreError, Sharing};

/// Collects the mistakes of one file.
struct Checker<'a> {
    file: &'a Path,
    errors: Vec<Error>,
    rules: usize,
}

impl Checker<'_> {
    fn error<T>(&mut self, at: &Spanned<T>, field: &str, message: impl Into<String>) {
        let line = at.referenced.line();
        self.errors.push(Error::new(
            self.file,
            (line > 0).then_some(line),
            field,
            message,
        ));
    }
}

/// Checks one parsed file.
pub(crate) fn domain(file: &Path, raw: raw::File) -> Result<Domain, Vec<Error>> {
    let mut c = Checker {
        file,
        errors: Vec::new(),
        rules: 0,
    };
    let name = match raw.domain {
        Some(d) if !d.value.is_empty() => d.value,
        Some(d) => {
            c.error(&d, "domain", "config file cannot have an empty domain");
            String::new()
        }
        None => {
            c.errors.push(Error::new(
                file,
                None,
                "domain",
                "config file has no domain",
            ));
            String::new()
        }
    };
    let root = level(&mut c, raw.descriptors, "descriptors", "");
    if c.errors.is_empty() {
        let mut key_root = String::with_capacity(name.len());
        crate::set::escape_into(&mut key_root, &name);
        Ok(Domain {
            name: Arc::from(name),
            key_root,
            file: file.to_owned(),
            root,
            rules: c.rules,
        })
    } else {
        Err(c.errors)
    }
}

fn level(
    c: &mut Checker<'_>,
    descriptors: Vec<raw::Descriptor>,
    field: &str,
    parent: &str,
) -> Level {
    let mut level = Level::default();
    for (i, d) in descriptors.into_iter().enumerate() {
        let field = format!("{field}[{i}]");
        let key = d.key.value.clone();
        if key.is_empty() {
            c.error(
                &d.key,
                &format!("{field}.key"),
                "descriptor has an empty key",
            );
        }
        let value = d
            .value
            .as_ref()
            .map(|v| v.value.clone())
            .filter(|v| !v.is_empty());
        // The reference's composite key: `key_value`, or `key` for the default node.
        let composite = match &value {
            Some(v) => format!("{key}_{v}"),
            None => key.clone(),
        };
        if level.nodes.contains_key(&composite) {
            c.error(
                &d.key,
                &format!("{field}.key"),
                format!("duplicate descriptor composite key '{composite}'"),
            );
            continue;
        }
        let metric = if parent.is_empty() {
            composite.clone()
        } else {
            format!("{parent}.{composite}")
        };
        let is_wildcard = value.as_deref().is_some_and(|v| v.contains('*'));
        let node = node(c, d, &field, &metric, is_wildcard);
        if is_wildcard {
            level.wildcards.push(composite.clone());
        }
        level.nodes.insert(composite, node);
    }
    level
}

fn node(
    c: &mut Checker<'_>,
    d: raw::Descriptor,
    field: &str,
    metric: &str,
    is_wildcard: bool,
) -> Node {
    let shared_pattern = match &d.share_threshold {
        Some(s) if s.value && !is_wildcard => {
            c.error(
                s,
                &format!("{field}.share_threshold"),
                "share_threshold can only be set on a value with a wildcard",
            );
            None
        }
        Some(s) if s.value => d.value.as_ref().map(|v| v.value.clone()),
        _ => None,
    };

    let mode = match (&d.mode, d.shadow_mode) {
        (None, false) => Mode::Enforce,
        (None, true) => Mode::Shadow,
        (Some(m), shadow) => match (m.value.as_str(), shadow) {
            ("enforce", false) => Mode::Enforce,
            ("shadow", _) => Mode::Shadow,
            ("enforce", true) => {
                c.error(
                    m,
                    &format!("{field}.mode"),
                    "mode: enforce contradicts shadow_mode: true",
                );
                Mode::Shadow
            }
            (other, _) => {
                c.error(
                    m,
                    &format!("{field}.mode"),
                    format!("unknown mode `{other}` (expected enforce or shadow)"),
                );
                Mode::Enforce
            }
        },
    };
    let on_store_error = d.on_store_error.as_ref().and_then(|o| {
        o.value
            .parse::<OnStoreError>()
            .map_err(|e| c.error(o, &format!("{field}.on_store_error"), e))
            .ok()
    });
    if let Some(l) = d.limits.as_ref().filter(|_| d.quota_mode) {
        c.error(
            l,
            &format!("{field}.quota_mode"),
            "quota_mode applies to rate_limit, not limits",
        );
    }

    let metadata = d.metadata.as_ref().and_then(|m| match &m.value {
        serde_json::Value::Object(map) => Some(Arc::new(map.clone())),
        serde_json::Value::Null => None,
        _ => {
            c.error(m, &format!("{field}.metadata"), "metadata must be a map");
            None
        }
    });
    let base =
        |limit, requests_per_unit, unit, name: Option<String>, slot: String, replaces| Rule {
            name: name.filter(|n| !n.is_empty()).map(Arc::from),
            limit,
            requests_per_unit,
            unit,
            mode,
            quota_mode: d.quota_mode,
            on_store_error,
            replaces,
            sharing: Sharing::Exact,
            reference: false,
            metered: false,
            slot: Arc::from(slot),
            metric: Arc::from(metric),
            metadata: metadata.clone(),
            counters: Default::default(),
            priorities: None,
        };

    let mut rules = Vec::new();
    match (&d.rate_limit, &d.limits) {
        (Some(_), Some(limits)) => {
            c.error(
                limits,
                &format!("{field}.limits"),
                "a descriptor has either rate_limit or limits, not both",
            );
        }
        (Some(rl), None) => {
            let f = format!("{field}.rate_limit");
            let replaces = replaces(c, rl, &rl.value.replaces, rl.value.name.as_deref(), &f);
            let unit = rl.value.unit.as_deref().unwrap_or("");
            let unit = unit.parse::<Unit>();
            match (rl.value.unlimited, unit) {
                (true, Ok(_)) => c.error(
                    rl,
                    &f,
                    "should not have an unlimited rate limit with a unit",
                ),
                (true, Err(_)) => rules.push(base(
                    RuleLimit::Unlimited,
                    0,
                    None,
                    rl.value.name.clone(),
                    String::new(),
                    replaces,
                )),
                (false, Err(e)) => c.error(rl, &format!("{f}.unit"), e),
                (false, Ok(unit)) => {
                    let rpu = u64::from(rl.value.requests_per_unit);
                    let mut rule = Rule::reference(rpu, unit);
                    rule.name = rl
                        .value
                        .name
                        .clone()
                        .filter(|n| !n.is_empty())
                        .map(Arc::from);
                    rule.mode = mode;
                    rule.quota_mode = d.quota_mode;
                    rule.on_store_error = on_store_error;
                    rule.replaces = replaces;
                    rule.metric = Arc::from(metric);
                    rule.metadata = metadata.clone();
                    rules.push(rule);
                }
            }
        }
        (None, Some(limits)) => {
            if limits.value.is_empty() {
                c.error(limits, &format!("{field}.limits"), "limits is empty");
            }
            for (j, l) in limits.value.iter().enumerate() {
                let f = format!("{field}.limits[{j}]");
                if let Some(name) = &l.value.name
                    && limits.value[..j]
                        .iter()
                        .any(|o| o.value.name.as_ref() == Some(name))
                {
                    c.error(
                        l,
                        &format!("{f}.name"),
                        format!("two limits named `{name}` in one descriptor"),
                    );
                }
                let replaces = replaces(c, l, &l.value.replaces, l.value.name.as_deref(), &f);
                match native_limit(&l.value) {
                    Ok((limit, unit, sharing, priorities)) => {
                        let slot = match &l.value.name {
                            Some(name) => format!("#{name}"),
                            None => format!("#{j}"),
                        };
                        rules.push(Rule {
                            sharing,
                            metered: l.value.metered,
                            priorities: priorities.map(Arc::new),
                            ..base(
                                RuleLimit::Limited(limit.clone()),
                                limit.limit(),
                                unit,
                                l.value.name.clone(),
                                slot,
                                replaces,
                            )
                        });
                    }
                    Err((sub, message)) => {
                        let f = if sub.is_empty() {
                            f
                        } else {
                            format!("{f}.{sub}")
                        };
                        c.error(l, &f, message);
                    }
                }
            }
        }
        (None, None) => {}
    }
    c.rules += rules.len();

    let children = (!d.descriptors.is_empty())
        .then(|| level(c, d.descriptors, &format!("{field}.descriptors"), metric));
    Node {
        rules,
        children,
        shared_pattern,
    }
}

fn replaces<T>(
    c: &mut Checker<'_>,
    at: &Spanned<T>,
    raw: &[raw::Replaces],
    own: Option<&str>,
    field: &str,
) -> Vec<Arc<str>> {
    let mut names = Vec::new();
    for (k, r) in raw.iter().enumerate() {
        let f = format!("{field}.replaces[{k}].name");
        match r.name.as_deref() {
            None | Some("") => c.error(at, &f, "replaces name cannot be empty"),
            Some(n) if Some(n) == own => c.error(
                at,
                &f,
                "replaces should not contain the name of the same descriptor",
            ),
            Some(n) => names.push(Arc::from(n)),
        }
    }
    names
}
