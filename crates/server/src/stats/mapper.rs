//! statsd_exporter's mapping, as the reference's in-process exporter applies it to its
//! stats: each statsd name is matched against the mappings (every `glob` in order,
//! then every `regex` in order; the first that matches wins), and becomes the
//! mapping's `name` and `labels`, `$1`… standing for the match's groups; `action: drop`
//! keeps no series. A name no mapping matches keeps a series of its own, its dots and
//! other characters Prometheus refuses written as `_`, with no labels.
//!
//! A glob's `*` matches within one dot-separated part of a name (`[^.]*`); a regex is
//! RE2 syntax, unanchored, as statsd_exporter reads it.

use regex::Regex;
use serde::Deserialize;

/// The kind of a stat, for `match_metric_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// A timer, histogram or distribution (statsd_exporter's "observer").
    Timer,
}

/// A stat's Prometheus name and labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub name: String,
    pub labels: Vec<metrics::Label>,
}

#[derive(Debug)]
struct Mapping {
    pattern: Regex,
    name: String,
    labels: Vec<(String, String)>,
    kind: Option<Kind>,
    drop: bool,
}

/// A mapping file, checked.
#[derive(Debug)]
pub struct Mapper {
    globs: Vec<Mapping>,
    regexes: Vec<Mapping>,
}

/// The reference's default mapping (src/stats/prom/default_mapper.yaml in
/// envoyproxy/ratelimit): a rule's stats by domain and the first one or two levels of
/// its path, the call errors, the gRPC calls and their response time, the config loads.
pub const DEFAULT: &str = r#"
mappings:
  - { match: "ratelimit.service.rate_limit.*.*.near_limit", name: "ratelimit_service_rate_limit_near_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: "ratelimit.service.rate_limit.*.*.over_limit", name: "ratelimit_service_rate_limit_over_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: "ratelimit.service.rate_limit.*.*.total_hits", name: "ratelimit_service_rate_limit_total_hits", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: "ratelimit.service.rate_limit.*.*.within_limit", name: "ratelimit_service_rate_limit_within_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: "ratelimit.service.rate_limit.*.*.shadow_mode", name: "ratelimit_service_rate_limit_shadow_mode", timer_type: "histogram", labels: { domain: "$1", key1: "$2" } }
  - { match: 'ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)(\..*)\.near_limit', match_type: regex, name: "ratelimit_service_rate_limit_near_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: 'ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)(\..*)\.over_limit', match_type: regex, name: "ratelimit_service_rate_limit_over_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: 'ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)(\..*)\.total_hits', match_type: regex, name: "ratelimit_service_rate_limit_total_hits", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: 'ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)(\..*)\.within_limit', match_type: regex, name: "ratelimit_service_rate_limit_within_limit", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: 'ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)(\..*)\.shadow_mode', match_type: regex, name: "ratelimit_service_rate_limit_shadow_mode", timer_type: "histogram", labels: { domain: "$1", key1: "$2", key2: "$3" } }
  - { match: "ratelimit.service.call.should_rate_limit.*", name: "ratelimit_service_should_rate_limit_error", match_metric_type: counter, labels: { err_type: "$1" } }
  - { match: "ratelimit_server.*.total_requests", name: "ratelimit_service_total_requests", match_metric_type: counter, labels: { grpc_method: "$1" } }
  - { match: "ratelimit_server.*.response_time", name: "ratelimit_service_response_time_seconds", timer_type: histogram, labels: { grpc_method: "$1" } }
  - { match: "ratelimit.service.config_load_success", name: "ratelimit_service_config_load_success", match_metric_type: counter }
  - { match: "ratelimit.service.config_load_error", name: "ratelimit_service_config_load_error", match_metric_type: counter }
"#;

/// A mapping file as written (statsd_exporter's keys; those about series shapes are
/// read and left to the exporter's defaults).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    mappings: Vec<Raw>,
}

// Every key statsd_exporter reads is accepted (a file written for it loads here); those
// about the shapes of series are not acted on.
#[allow(dead_code)]
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Defaults {
    match_type: Option<String>,
    #[serde(default)]
    glob_disable_ordering: Option<bool>,
    timer_type: Option<serde::de::IgnoredAny>,
    observer_type: Option<serde::de::IgnoredAny>,
    buckets: Option<serde::de::IgnoredAny>,
    quantiles: Option<serde::de::IgnoredAny>,
    histogram_options: Option<serde::de::IgnoredAny>,
    summary_options: Option<serde::de::IgnoredAny>,
    ttl: Option<serde::de::IgnoredAny>,
}

#[allow(dead_code)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(rename = "match")]
    pattern: String,
    match_type: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    labels: ordered::Labels,
    match_metric_type: Option<String>,
    action: Option<String>,
    help: Option<serde::de::IgnoredAny>,
    timer_type: Option<serde::de::IgnoredAny>,
    observer_type: Option<serde::de::IgnoredAny>,
    buckets: Option<serde::de::IgnoredAny>,
    quantiles: Option<serde::de::IgnoredAny>,
    histogram_options: Option<serde::de::IgnoredAny>,
    summary_options: Option<serde::de::IgnoredAny>,
    ttl: Option<serde::de::IgnoredAny>,
    honor_labels: Option<serde::de::IgnoredAny>,
    scale: Option<serde::de::IgnoredAny>,
}

/// Labels in the order the file writes them.
mod ordered {
    use serde::de::{Deserializer, MapAccess, Visitor};

    #[derive(Default)]
    pub struct Labels(pub Vec<(String, String)>);

    impl<'de> serde::Deserialize<'de> for Labels {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Labels;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a map of label names to values")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Labels, A::Error> {
                    let mut out = Vec::new();
                    while let Some((k, v)) = m.next_entry::<String, String>()? {
                        out.push((k, v));
                    }
                    Ok(Labels(out))
                }
            }
            d.deserialize_map(V)
        }
    }
}

impl Mapper {
    /// The reference's default mapping.
    pub fn reference() -> Mapper {
        Mapper::parse(DEFAULT).expect("the default mapping is valid (tested)")
    }

    /// Reads the mapping file at `path`.
    pub fn from_file(path: &std::path::Path) -> Result<Mapper, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Mapper::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Checks a mapping file: YAML in statsd_exporter's format, each pattern valid,
    /// each kept series named.
    pub fn parse(yaml: &str) -> Result<Mapper, String> {
        let file: File = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        let default_type = file.defaults.match_type.as_deref().unwrap_or("glob");
        let mut mapper = Mapper {
            globs: Vec::new(),
            regexes: Vec::new(),
        };
        for (i, raw) in file.mappings.into_iter().enumerate() {
            let at = |m: String| format!("mapping {} (`{}`): {m}", i + 1, raw.pattern);
            let drop = match raw.action.as_deref() {
                None | Some("map") => false,
                Some("drop") => true,
                Some(other) => return Err(at(format!("action `{other}` is not map or drop"))),
            };
            if !drop && raw.name.is_empty() {
                return Err(at("no name".into()));
            }
            let kind = match raw.match_metric_type.as_deref() {
                None => None,
                Some("counter") => Some(Kind::Counter),
                Some("gauge") => Some(Kind::Gauge),
                Some("observer" | "timer" | "histogram" | "distribution") => Some(Kind::Timer),
                Some(other) => {
                    return Err(at(format!(
                        "match_metric_type `{other}` is not counter, gauge or observer"
                    )));
                }
            };
            let (pattern, glob) = match raw.match_type.as_deref().unwrap_or(default_type) {
                "glob" => (glob_pattern(&raw.pattern), true),
                "regex" => (raw.pattern.clone(), false),
                other => return Err(at(format!("match_type `{other}` is not glob or regex"))),
            };
            let pattern = Regex::new(&pattern).map_err(|e| at(e.to_string()))?;
            let mapping = Mapping {
                pattern,
                name: raw.name,
                labels: raw.labels.0,
                kind,
                drop,
            };
            if glob {
                mapper.globs.push(mapping);
            } else {
                mapper.regexes.push(mapping);
            }
        }
        Ok(mapper)
    }

    /// `name`'s series, or `None` when a mapping drops it.
    pub fn map(&self, name: &str, kind: Kind) -> Option<Mapped> {
        for m in self.globs.iter().chain(&self.regexes) {
            if m.kind.is_some_and(|k| k != kind) {
                continue;
            }
            let Some(caps) = m.pattern.captures(name) else {
                continue;
            };
            if m.drop {
                return None;
            }
            let expand = |template: &str| {
                let mut out = String::new();
                caps.expand(template, &mut out);
                out
            };
            let labels = m
                .labels
                .iter()
                .map(|(k, v)| metrics::Label::new(k.clone(), expand(v)))
                .collect();
            return Some(Mapped {
                name: escape(&expand(&m.name)),
                labels,
            });
        }
        Some(Mapped {
            name: escape(name),
            labels: Vec::new(),
        })
    }
}

/// A glob as an anchored regex: each `*` one group within a dot-separated part.
fn glob_pattern(glob: &str) -> String {
    let parts: Vec<String> = glob.split('*').map(regex::escape).collect();
    format!("^{}$", parts.join("([^.]*)"))
}

/// A Prometheus metric name: characters it refuses become `_`, and a leading digit
/// gets one before it.
fn escape(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests;
