//! Stage one: serde structs that mirror a policy file, field for field.
//!
//! The Envoy reference service's keys (`domain`, `descriptors`, `key`, `value`,
//! `rate_limit`, …) plus Spillway's additions (`limits`, `mode`, `on_store_error`).
//! Unknown keys are refused everywhere, as the reference refuses them. Nothing here is
//! checked beyond its type: [`crate::validate`] turns these into a `PolicySet`.
//! Values that a later error must point at are `Spanned`, so the error names the line.

use serde::Deserialize;
use serde_saphyr::Spanned;

/// `descriptors:` with nothing after it (YAML null) is no descriptors, as the
/// reference reads it: a domain, or a node, without rules.
fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// One file: one domain.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    pub domain: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub descriptors: Vec<Descriptor>,
}

/// One node of the descriptor tree.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Descriptor {
    pub key: Spanned<String>,
    pub value: Option<Spanned<String>>,
    pub rate_limit: Option<Spanned<RateLimit>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub descriptors: Vec<Descriptor>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub quota_mode: bool,
    // Accepted as the reference accepts them; Spillway's metrics never carry request
    // values (no per-key labels), so these change nothing.
    #[serde(default)]
    #[allow(dead_code)]
    pub detailed_metric: bool,
    #[serde(default)]
    #[allow(dead_code)]
    pub value_to_metric: bool,
    #[serde(default)]
    pub share_threshold: Option<Spanned<bool>>,
    /// Returned to Envoy in the response's dynamic metadata while the descriptor is
    /// within its limit (`RESPONSE_DYNAMIC_METADATA`): any map, its content unchecked.
    #[serde(default)]
    pub metadata: Option<Spanned<serde_json::Value>>,

    // Spillway's additions.
    pub limits: Option<Spanned<Vec<Spanned<NativeLimit>>>>,
    pub mode: Option<Spanned<String>>,
    pub on_store_error: Option<Spanned<String>>,
}

/// The reference's `rate_limit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimit {
    pub unit: Option<String>,
    #[serde(default)]
    pub requests_per_unit: u32,
    #[serde(default)]
    pub unlimited: bool,
    pub name: Option<String>,
    #[serde(default)]
    pub replaces: Vec<Replaces>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Replaces {
    pub name: Option<String>,
}

/// One of Spillway's `limits`: any algorithm with its parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NativeLimit {
    pub name: Option<String>,
    pub algorithm: Option<String>,
    pub limit: u64,
    /// A duration (`90s`, `1m`, `250ms`)...
    pub window: Option<String>,
    /// ...or a reference unit (`second` … `year`)...
    pub unit: Option<String>,
    /// ...or a calendar period (`day`, `week`, `month`, `year`), in `time_zone`.
    pub period: Option<String>,
    /// The IANA time zone of `period` (default UTC).
    pub time_zone: Option<String>,
    pub burst: Option<u64>,
    /// How long a request over a `gcra` or `token_bucket` limit may wait for its turn
    /// instead of being denied, a duration.
    pub max_wait: Option<String>,
    pub precision: Option<u32>,
    pub edge: Option<String>,
    #[serde(default)]
    pub count_rejected: bool,
    /// A metered budget: hits above 0 are usage reported after the fact, charged in
    /// full (into debt); a check looks with hits 0.
    #[serde(default)]
    pub metered: bool,
    /// Units a server takes from the store at once (`Sharing::Lease`).
    pub lease: Option<u64>,
    /// How often a server adds its hits to the store (`Sharing::Sync`), a duration.
    pub sync: Option<String>,
    #[serde(default)]
    pub replaces: Vec<Replaces>,
    /// A `shares` limit's children by name (`*`: every unlisted value).
    pub children: Option<std::collections::BTreeMap<String, RawShare>>,
    /// A `shares` limit's priority: the descriptor entry that names it...
    pub priority: Option<String>,
    /// ...and the names it may take, highest first.
    pub priorities: Option<Vec<String>>,
    /// The part of the borrowable burst each priority keeps from the next lower one.
    pub reserve: Option<f64>,
    /// Budget alerts: the parts of the limit (`0.8`) whose first crossing in a window
    /// is reported once.
    pub alert_at: Option<Vec<f64>>,
}

/// One child of a `shares` limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawShare {
    #[serde(default)]
    pub rate: u64,
    pub ceil: Option<u64>,
    pub weight: Option<u64>,
    pub burst: Option<u64>,
}
