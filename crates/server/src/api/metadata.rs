//! The reference's dynamic metadata (`RESPONSE_DYNAMIC_METADATA=true`): Envoy stores it
//! under the rate limit filter's namespace, where routes and access logs can read it.
//!
//! ```text
//! { "domain": D,
//!   "descriptors": [ { "entries": ["k=v", …], "limit"?: "…", "hitsAddend"?: n }, … ],
//!   "hitsAddend"?: n,                      (the request's, when not 0)
//!   "metadata"?: { … } }                   (the passing rules' `metadata`, merged)
//! ```
//!
//! The request's part is taken from the message as it came (the service reads a
//! `hits_addend` of 0 as 1, the metadata reports what was sent); the rules' part is
//! the service's ([`CheckResponse::metadata`](crate::CheckResponse)).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value as PbValue, value::Kind};
use serde_json::{Map, Value, json};

use super::wire::request_unit;

/// The request's part of the metadata.
pub fn of_request(req: &RateLimitRequest) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("domain".into(), json!(req.domain));
    let descriptors = req.descriptors.iter().map(descriptor).collect();
    out.insert("descriptors".into(), Value::Array(descriptors));
    if req.hits_addend != 0 {
        out.insert("hitsAddend".into(), json!(req.hits_addend));
    }
    out
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut out = Map::new();
    let entries = d
        .entries
        .iter()
        .map(|e| json!(format!("{}={}", e.key, e.value)))
        .collect();
    out.insert("entries".into(), Value::Array(entries));
    if let Some(o) = &d.limit {
        // The reference writes the override in protobuf text format.
        let unit = request_unit(o.unit)
            .map_or_else(|| o.unit.to_string(), |u| u.name().to_ascii_uppercase());
        out.insert(
            "limit".into(),
            json!(format!(
                "requests_per_unit:{} unit:{unit}",
                o.requests_per_unit
            )),
        );
    }
    if let Some(h) = &d.hits_addend {
        out.insert("hitsAddend".into(), json!(h.value));
    }
    Value::Object(out)
}

/// The whole metadata: the request's part, then the passing rules' `metadata` if any.
pub fn whole(
    mut request: Map<String, Value>,
    rules: Option<&spillway_policy::Metadata>,
) -> Map<String, Value> {
    if let Some(m) = rules.filter(|m| !m.is_empty()) {
        request.insert("metadata".into(), Value::Object(m.clone()));
    }
    request
}

/// A JSON object as a protobuf `Struct`.
pub fn to_struct(map: &Map<String, Value>) -> Struct {
    Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

fn to_value(v: &Value) -> PbValue {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        Value::Object(o) => Kind::StructValue(to_struct(o)),
    };
    PbValue { kind: Some(kind) }
}

/// A protobuf `Struct` in protobuf's JSON mapping (a whole number prints without `.0`).
pub fn to_json(s: &Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(v: &PbValue) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9.0e15 => json!(*n as i64),
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_to_json).collect()),
        Some(Kind::StructValue(s)) => to_json(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
        Entry, RateLimitOverride,
    };
    use envoy_types::pb::google::protobuf::UInt64Value;

    #[test]
    fn the_request_part_says_what_was_sent() {
        let req = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![
                RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "k".into(),
                        value: "v".into(),
                    }],
                    ..Default::default()
                },
                RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "a".into(),
                        value: String::new(),
                    }],
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 7,
                        unit: 2,
                    }),
                    hits_addend: Some(UInt64Value { value: 0 }),
                    ..Default::default()
                },
            ],
            hits_addend: 0,
        };
        let rules: spillway_policy::Metadata =
            serde_json::from_value(json!({ "tier": { "name": "gold" } })).unwrap();
        let whole = whole(of_request(&req), Some(&rules));
        assert_eq!(
            Value::Object(whole.clone()),
            json!({
                "domain": "d",
                "descriptors": [
                    { "entries": ["k=v"] },
                    { "entries": ["a="], "limit": "requests_per_unit:7 unit:MINUTE", "hitsAddend": 0 },
                ],
                "metadata": { "tier": { "name": "gold" } },
            })
        );
        // Through protobuf's Struct and back, as `/json` encodes it.
        assert_eq!(to_json(&to_struct(&whole)), Value::Object(whole));
    }
}
