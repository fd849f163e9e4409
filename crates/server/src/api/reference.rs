//! The reference's `POST /json`: a `RateLimitRequest` in the protobuf JSON mapping in,
//! a `RateLimitResponse` in the same mapping out. `envoy-types` has no serde support,
//! so the mapping of these few messages is written out here: field names in lowerCamel
//! or as in the proto (one of the two: a field given under both is refused, as the
//! reference's protojson does), 64-bit numbers as numbers or strings, enums by name or
//! number, unknown fields refused, zero values left out of the answer.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, rate_limit::Unit};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{Map, Value, json};
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::{metadata, respond, wire};
use crate::service::CheckError;
use crate::service::request::CheckRequest;
use crate::state::AppState;
use crate::{metrics, otel};
use tracing::Instrument;

/// A body of `POST /json`, decoded (not yet checked against the service's bounds).
pub fn decode_request(body: &[u8]) -> Result<CheckRequest, CheckError> {
    decode_with_metadata(body, false).map(|(req, _)| req)
}

/// A body of `POST /json`, decoded, with the request's part of the dynamic metadata
/// when `with_metadata`.
fn decode_with_metadata(
    body: &[u8],
    with_metadata: bool,
) -> Result<(CheckRequest, Option<Map<String, Value>>), CheckError> {
    wire::request_with_metadata(decode(body).map_err(CheckError::Invalid)?, with_metadata)
}

/// Decodes a request, or says what is wrong with it.
fn decode(body: &[u8]) -> Result<RateLimitRequest, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let mut req = RateLimitRequest::default();
    for (k, v) in fields(&v, "request")? {
        match k {
            "domain" => req.domain = string(v, "domain")?,
            "descriptors" => {
                req.descriptors = array(v, "descriptors")?
                    .iter()
                    .enumerate()
                    .map(|(i, d)| descriptor(d, i))
                    .collect::<Result<_, _>>()?
            }
            "hitsAddend" => req.hits_addend = u32_of(v, "hitsAddend")?,
            other => return Err(format!("unknown field `{other}` in request")),
        }
    }
    Ok(req)
}

fn descriptor(v: &Value, i: usize) -> Result<RateLimitDescriptor, String> {
    let at = |f: &str| format!("descriptors[{i}].{f}");
    let mut d = RateLimitDescriptor::default();
    for (k, v) in fields(v, &format!("descriptors[{i}]"))? {
        match k {
            "entries" => {
                d.entries = array(v, &at("entries"))?
                    .iter()
                    .enumerate()
                    .map(|(j, e)| entry(e, &at(&format!("entries[{j}]"))))
                    .collect::<Result<_, _>>()?
            }
            "limit" => {
                let mut o = RateLimitOverride::default();
                for (k, v) in fields(v, &at("limit"))? {
                    match k {
                        "requestsPerUnit" => {
                            o.requests_per_unit = u32_of(v, &at("limit.requestsPerUnit"))?
                        }
                        "unit" => o.unit = unit(v, &at("limit.unit"))?,
                        other => return Err(format!("unknown field `{other}` in {}", at("limit"))),
                    }
                }
                d.limit = Some(o);
            }
            "hitsAddend" => {
                d.hits_addend = match v {
                    Value::Null => None,
                    v => Some(UInt64Value {
                        value: u64_of(v, &at("hitsAddend"))?,
                    }),
                }
            }
            "isNegativeHits" => {
                d.is_negative_hits = v
                    .as_bool()
                    .ok_or_else(|| format!("{} must be true or false", at("isNegativeHits")))?
            }
            other => return Err(format!("unknown field `{other}` in descriptors[{i}]")),
        }
    }
    Ok(d)
}

fn entry(v: &Value, at: &str) -> Result<Entry, String> {
    let mut e = Entry::default();
    for (k, v) in fields(v, at)? {
        match k {
            "key" => e.key = string(v, &format!("{at}.key"))?,
            "value" => e.value = string(v, &format!("{at}.value"))?,
            other => return Err(format!("unknown field `{other}` in {at}")),
        }
    }
    Ok(e)
}

/// An object's fields under their lowerCamel names (`hits_addend` read as
/// `hitsAddend`; an unknown name is kept as written, for the error that names it). A
/// field given under both names is refused: which one counts would otherwise depend on
/// the order of the keys, and a client could hide a value from a check of the other.
fn fields<'a>(v: &'a Value, at: &str) -> Result<Vec<(&'a str, &'a Value)>, String> {
    let o = v
        .as_object()
        .ok_or_else(|| format!("{at} must be an object"))?;
    let mut out: Vec<(&str, &Value)> = Vec::with_capacity(o.len());
    for (k, v) in o {
        let name = CAMEL
            .iter()
            .find(|(snake, _)| snake == k)
            .map_or(k.as_str(), |(_, camel)| camel);
        if out.iter().any(|(seen, _)| *seen == name) {
            return Err(format!("{at}.{name} is given twice (once as `{k}`)"));
        }
        out.push((name, v));
    }
    Ok(out)
}

/// The proto names of the fields read here whose JSON name differs.
const CAMEL: [(&str, &str); 3] = [
    ("hits_addend", "hitsAddend"),
    ("requests_per_unit", "requestsPerUnit"),
    ("is_negative_hits", "isNegativeHits"),
];

fn array<'a>(v: &'a Value, at: &str) -> Result<&'a [Value], String> {
    match v {
        Value::Null => Ok(&[]),
        Value::Array(a) => Ok(a),
        _ => Err(format!("{at} must be an array")),
    }
}

fn string(v: &Value, at: &str) -> Result<String, String> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        _ => Err(format!("{at} must be a string")),
    }
}

/// A uint64 as the JSON mapping allows it: a non-negative integer, or one in a string.
fn u64_of(v: &Value, at: &str) -> Result<u64, String> {
    let n = match v {
        Value::Null => Some(0),
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse::<u64>().ok(),
        _ => None,
    };
    n.ok_or_else(|| format!("{at} must be a non-negative integer, not {v}"))
}

fn u32_of(v: &Value, at: &str) -> Result<u32, String> {
    let n = u64_of(v, at)?;
    u32::try_from(n).map_err(|_| format!("{at} {n} does not fit in 32 bits"))
}

/// `envoy.type.v3.RateLimitUnit` by name or number.
fn unit(v: &Value, at: &str) -> Result<i32, String> {
    const NAMES: [&str; 7] = [
        "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR",
    ];
    match v {
        Value::String(s) => NAMES
            .iter()
            .position(|n| n == s)
            .map(|p| p as i32)
            .ok_or_else(|| {
                format!("{at} `{s}` is not one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR")
            }),
        v => Ok(u32_of(v, at)? as i32),
    }
}

/// Encodes a response as the reference does: lowerCamel names, enums by name, zero
/// values left out, durations as `"58s"`.
pub fn encode(r: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    out.insert("overallCode".into(), code(r.overall_code));
    if !r.statuses.is_empty() {
        let statuses = r
            .statuses
            .iter()
            .map(|s| {
                let mut o = Map::new();
                if s.code != 0 {
                    o.insert("code".into(), code(s.code));
                }
                if let Some(l) = &s.current_limit {
                    let mut limit = Map::new();
                    if l.requests_per_unit != 0 {
                        limit.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                    }
                    if l.unit != 0 {
                        let name = Unit::try_from(l.unit).map_or("UNKNOWN", |u| u.as_str_name());
                        limit.insert("unit".into(), json!(name));
                    }
                    if !l.name.is_empty() {
                        limit.insert("name".into(), json!(l.name));
                    }
                    o.insert("currentLimit".into(), Value::Object(limit));
                }
                if s.limit_remaining != 0 {
                    o.insert("limitRemaining".into(), json!(s.limit_remaining));
                }
                if let Some(d) = &s.duration_until_reset {
                    o.insert(
                        "durationUntilReset".into(),
                        json!(format!("{}s", d.seconds)),
                    );
                }
                Value::Object(o)
            })
            .collect();
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if let Some(m) = &r.dynamic_metadata {
        out.insert("dynamicMetadata".into(), metadata::to_json(m));
    }
    if !r.response_headers_to_add.is_empty() {
        let headers = r
            .response_headers_to_add
            .iter()
            .map(|h| json!({ "key": h.key, "value": h.value }))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

fn code(c: i32) -> Value {
    json!(Code::try_from(c).map_or("UNKNOWN", |c| c.as_str_name()))
}

/// As the reference answers: 200 OK, 429 over the limit, 400 for a body that is not a
/// request *or* when the service failed (the reference's mapping; `/v1/check` says 503).
pub(super) async fn check(
    State(state): State<Arc<AppState>>,
    parent: otel::Parent,
    body: Bytes,
) -> Response {
    metrics::request("json");
    let span = otel::decision_span("/json", || parent.headers());
    let answer = async {
        let (req, request_metadata) =
            decode_with_metadata(&body, state.service.dynamic_metadata())?;
        Ok::<_, CheckError>((
            state.check(req, state.http_callers, Some("json")).await?,
            request_metadata,
        ))
    };
    match answer.instrument(span.clone()).await {
        Ok((mut r, request_metadata)) => {
            otel::outcome(&span, Ok(r.overall == crate::service::request::Code::Ok));
            // The reference's answer has no wait to say: the OK is held for it.
            respond::wait_out("json", &mut r, &state.waiters).await;
            let status = respond::answer_status(r.overall);
            let pb = wire::response(&r, &state.headers, request_metadata);
            (status, Json(encode(&pb))).into_response()
        }
        Err(e) => {
            otel::outcome(&span, Err(e.kind()));
            metrics::invalid_request("json");
            respond::reference_error(&e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_both_field_spellings_and_string_numbers() {
        let r = decode(
            br#"{"domain":"d","hits_addend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],
                "hitsAddend":"0","limit":{"requestsPerUnit":5,"unit":"MINUTE"}}]}"#,
        )
        .unwrap();
        assert_eq!(r.hits_addend, 2);
        assert_eq!(r.descriptors[0].hits_addend, Some(UInt64Value { value: 0 }));
        assert_eq!(r.descriptors[0].limit.as_ref().unwrap().unit, 2);
    }

    #[test]
    fn refuses_what_the_mapping_does_not_allow() {
        for (body, expected) in [
            (&br#"{"domain":"d","bogus":1}"#[..], "unknown field `bogus`"),
            (br#"{"domain":5}"#, "domain must be a string"),
            (
                br#"{"hitsAddend":-1}"#,
                "hitsAddend must be a non-negative integer",
            ),
            (
                br#"{"hitsAddend":1.5}"#,
                "hitsAddend must be a non-negative integer",
            ),
            (br#"{"hitsAddend":4294967296}"#, "does not fit in 32 bits"),
            (
                br#"{"hitsAddend":2,"hits_addend":"1"}"#,
                "request.hitsAddend is given twice",
            ),
            (
                br#"{"descriptors":[{"hits_addend":"1","hitsAddend":9007199254740993}]}"#,
                "descriptors[0].hitsAddend is given twice",
            ),
            (
                br#"{"descriptors":[{"limit":{"requestsPerUnit":1,"requests_per_unit":9}}]}"#,
                "descriptors[0].limit.requestsPerUnit is given twice",
            ),
            (
                br#"{"descriptors":[{"limit":{"unit":"WEEK"}}]}"#,
                "`WEEK` is not one of",
            ),
            (br#"[1]"#, "request must be an object"),
            (b"{\"domain\":\"\xff\"}", "body is not JSON"),
        ] {
            let e = decode(body).unwrap_err();
            assert!(e.contains(expected), "{e}");
        }
    }
}
