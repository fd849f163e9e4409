//! The one partial form every source fills ([`Partial`]: setting name -> raw value and
//! where it came from), the one merge (later wins), and the one build that turns it
//! into a [`Config`] through the rows of [`SETTINGS`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::table::{Kind, SETTINGS, Setting, setting};
use super::{
    Admin, Config, ConfigError, Headers, Listen, Log, Metrics, Rules, Service, Stats, Store, Tls,
    Tracing,
};

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The row's default.
    Default,
    /// The row's default where the reference's variables are in use.
    ReferenceDefault,
    /// A settings file.
    File(PathBuf),
    /// The reference's variables (the ones set, joined by `+`).
    Reference(String),
    /// A `SPILLWAY_*` variable.
    Env(String),
    /// A command-line flag.
    Flag(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::ReferenceDefault => f.write_str("default (the reference's)"),
            Origin::File(p) => write!(f, "file {}", p.display()),
            Origin::Reference(v) | Origin::Env(v) => write!(f, "env {v}"),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

impl Origin {
    /// How an error names the value: `settings.yaml: store_timeout`, `PORT`,
    /// `--store-timeout`.
    fn at(&self, name: &str) -> String {
        match self {
            Origin::Default | Origin::ReferenceDefault => format!("{name} (default)"),
            Origin::File(p) => format!("{}: {name}", p.display()),
            Origin::Reference(v) | Origin::Env(v) | Origin::Flag(v) => v.clone(),
        }
    }
}

/// A raw value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Given {
    pub value: String,
    pub origin: Origin,
}

/// Which defaults apply: Spillway's, or where the reference's variables are in use
/// (started as `ratelimit`, or any of them set), the reference's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    #[default]
    Native,
    Reference,
}

/// Settings by name, each with its raw value and origin: what every source makes.
#[derive(Clone, Debug, Default)]
pub struct Partial {
    given: BTreeMap<&'static str, Given>,
}

impl Partial {
    /// Every setting at its default for `profile`.
    pub fn defaults(profile: Profile) -> Partial {
        let mut p = Partial::default();
        for s in SETTINGS {
            let (value, origin) = match (profile, s.reference_default) {
                (Profile::Reference, Some(v)) => (v, Origin::ReferenceDefault),
                _ => (s.default, Origin::Default),
            };
            p.given.insert(
                s.name,
                Given {
                    value: value.to_owned(),
                    origin,
                },
            );
        }
        p
    }

    /// Sets `name`; an unknown name is an error naming the nearest known one.
    pub fn set(
        &mut self,
        name: &str,
        value: impl Into<String>,
        origin: Origin,
    ) -> Result<(), ConfigError> {
        let s = setting(name).ok_or_else(|| ConfigError(unknown(name)))?;
        self.given.insert(
            s.name,
            Given {
                value: value.into(),
                origin,
            },
        );
        Ok(())
    }

    /// `self`, with every value `later` has over it.
    pub fn merge(mut self, later: Partial) -> Partial {
        self.given.extend(later.given);
        self
    }

    /// The value of `name`, if any source gave one.
    pub fn get(&self, name: &str) -> Option<&Given> {
        self.given.get(name)
    }

    /// Every value given, in the table's order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static Setting, &Given)> {
        SETTINGS
            .iter()
            .filter_map(|s| self.given.get(s.name).map(|g| (s, g)))
    }

    /// A settings file (YAML: `name: value`, lists for list settings): files it names
    /// are relative to it; an unknown key is an error naming the nearest known one.
    pub fn from_file(path: &Path) -> Result<Partial, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: cannot read: {e}", path.display())))?;
        let at = |e: String| ConfigError(format!("{}: {e}", path.display()));
        let doc: serde_json::Value = serde_saphyr::from_str(&text)
            .map_err(|e| at(e.to_string().lines().next().unwrap_or("").to_owned()))?;
        let map = match doc {
            serde_json::Value::Null => return Ok(Partial::default()),
            serde_json::Value::Object(map) => map,
            _ => return Err(at("expected `setting: value` lines".into())),
        };
        let mut p = Partial::default();
        for (key, value) in map {
            let s = setting(&key).ok_or_else(|| at(unknown(&key)))?;
            let mut value = scalar(&value).map_err(|e| at(format!("{key}: {e}")))?;
            if s.kind == Kind::Path && !value.is_empty() {
                // Relative to the settings file, as a reader of the file would assume.
                if let Some(dir) = path.parent() {
                    value = dir.join(&value).display().to_string();
                }
            }
            p.set(s.name, value, Origin::File(path.to_owned()))?;
        }
        Ok(p)
    }

    /// The configuration these values make: each row's `set`, in the table's order, on
    /// every value given (a partial without defaults builds on nothing: merge it over
    /// [`Partial::defaults`] first).
    pub fn build(&self) -> Result<Config, ConfigError> {
        let mut config = blank();
        for (s, given) in self.iter() {
            (s.set)(&mut config, &given.value)
                .map_err(|e| ConfigError(format!("{}: {e}", given.origin.at(s.name))))?;
        }
        Ok(config)
    }
}

/// `unknown setting `x``, with the nearest known name when one is near.
fn unknown(name: &str) -> String {
    let nearest = SETTINGS
        .iter()
        .map(|s| (strsim::levenshtein(name, s.name), s.name))
        .min();
    match nearest {
        Some((d, near)) if d <= 2.max(name.len() / 3) => {
            format!("unknown setting `{name}` (did you mean `{near}`?)")
        }
        _ => format!("unknown setting `{name}` (docs/reference/settings.md lists them)"),
    }
}

/// A YAML value as the raw text a flag would give: lists joined with commas.
fn scalar(v: &serde_json::Value) -> Result<String, String> {
    use serde_json::Value;
    Ok(match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(items) => items
            .iter()
            .map(scalar)
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        Value::Object(_) => return Err("expected a value or a list, not a map".into()),
    })
}

/// The configuration before any row has written it (every row writes its field; the
/// sections whose fields all have an empty value start empty).
fn blank() -> Config {
    let any = SocketAddr::from(([0, 0, 0, 0], 0));
    Config {
        listen: Listen {
            http: any,
            grpc: any,
            header_read_timeout: Duration::ZERO,
            grpc_request_timeout: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            max_connections: None,
            drain_timeout: Duration::ZERO,
            max_connection_age: Duration::ZERO,
            max_connection_age_grace: Duration::ZERO,
            grpc_uds: None,
        },
        tls: Tls::default(),
        store: Store {
            url: String::new(),
            redis: spillway_redis::Access::default(),
            timeout: Duration::ZERO,
            timeout_max: None,
            window: Duration::ZERO,
            on_error: spillway_policy::OnStoreError::Closed,
            breaker_failures: 0,
            breaker_ratio: 0.0,
            breaker_window: Duration::ZERO,
            breaker_cooldown: Duration::ZERO,
            deny_cache_bytes: 0,
            memory_bytes: 0,
            share_bytes: 0,
            reference_local_cache: false,
            key_prefix: String::new(),
            cluster_shards: 0,
            health_follows_store: false,
            per_second: None,
        },
        rules: Rules::default(),
        service: Service::default(),
        headers: Headers::default(),
        admin: Admin::default(),
        metrics: Metrics::default(),
        rlqs: super::Rlqs {
            ttl: Duration::ZERO,
            abandon_after: Duration::ZERO,
            max_buckets: 0,
            expire_on_shutdown: false,
            max_streams: 0,
            unmatched: super::Unmatched::NoAnswer,
            store_timeout: Duration::ZERO,
        },
        stats: Stats::default(),
        tracing: Tracing::default(),
        log: Log::default(),
    }
}

/// The sources of one start, in the order they apply: defaults, the settings file,
/// the reference's variables, then flags and `SPILLWAY_*` variables.
#[derive(Debug, Default)]
pub struct Sources {
    /// `--settings`.
    pub file: Option<PathBuf>,
    /// The environment (name, value): the reference's variables are read from it.
    pub env: Vec<(String, String)>,
    /// Flags and `SPILLWAY_*` variables, as the command line gave them.
    pub flags: Partial,
    /// The binary was started as `ratelimit` (as the image starts it).
    pub called_ratelimit: bool,
}

/// A configuration, with every value's origin.
#[derive(Debug)]
pub struct Resolved {
    pub config: Config,
    /// The value of every setting and where it came from.
    pub given: Partial,
    pub profile: Profile,
}

impl Sources {
    /// Merges the sources, later winning, and builds the configuration.
    pub fn resolve(self) -> Result<Resolved, ConfigError> {
        let profile = if self.called_ratelimit || super::speaks_reference(&self.env) {
            Profile::Reference
        } else {
            Profile::Native
        };
        let file = match &self.file {
            Some(path) => Partial::from_file(path)?,
            None => Partial::default(),
        };
        let env = self.env;
        let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let given = Partial::defaults(profile)
            .merge(file)
            .merge(Partial::from_reference(&var)?)
            .merge(self.flags);
        Ok(Resolved {
            config: given.build()?,
            given,
            profile,
        })
    }
}
