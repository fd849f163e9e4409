//! Conversions between Envoy's protobuf messages and the service's own types, for the
//! gRPC API and the reference's `/json` (the same messages in JSON). The only file
//! (with `grpc.rs` and `reference.rs`) that knows the wire types.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as PbCode, DescriptorStatus, RateLimit, rate_limit::Unit as PbUnit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use spillway_policy::Unit;

use super::metadata;
use crate::config::Headers;
use crate::service::CheckError;
use crate::service::request::{CheckRequest, CheckResponse, Code, Descriptor, Override, Status};

/// A `RateLimitRequest` as the service's request. Numbers the protocol allows but the
/// service refuses (an unknown unit) are an `Invalid` error.
pub fn request(pb: RateLimitRequest) -> Result<CheckRequest, CheckError> {
    let descriptors = pb
        .descriptors
        .into_iter()
        .enumerate()
        .map(|(i, d)| descriptor(i, d))
        .collect::<Result<_, _>>()?;
    Ok(CheckRequest {
        domain: pb.domain,
        descriptors,
        // proto3 cannot tell 0 from absent; the reference reads both as 1.
        hits: u64::from(pb.hits_addend.max(1)),
        // Envoy's protocol has no such flag: a metered rule says it (see `Rule::metered`).
        ..CheckRequest::default()
    })
}

/// [`request`], and the request's part of the dynamic metadata when `with_metadata`
/// (taken from the message as it came: see [`metadata`]).
pub fn request_with_metadata(
    pb: RateLimitRequest,
    with_metadata: bool,
) -> Result<
    (
        CheckRequest,
        Option<serde_json::Map<String, serde_json::Value>>,
    ),
    CheckError,
> {
    let request_metadata = with_metadata.then(|| metadata::of_request(&pb));
    Ok((request(pb)?, request_metadata))
}

fn descriptor(i: usize, d: RateLimitDescriptor) -> Result<Descriptor, CheckError> {
    let limit = d
        .limit
        .map(|o| {
            let unit = request_unit(o.unit).ok_or_else(|| {
                CheckError::Invalid(format!(
                    "descriptor {i}: limit override has unknown unit {}",
                    o.unit
                ))
            })?;
            Ok(Override {
                requests_per_unit: u64::from(o.requests_per_unit),
                unit,
            })
        })
        .transpose()?;
    // `is_negative_hits` asks for a refund, which no algorithm here can give exactly:
    // the descriptor is checked without consuming rather than charged.
    let hits = if d.is_negative_hits {
        Some(0)
    } else {
        d.hits_addend.map(|h| h.value)
    };
    Ok(Descriptor {
        entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
        hits,
        limit,
    })
}

/// `envoy.type.v3.RateLimitUnit`: SECOND 1 … DAY 4, MONTH 5, YEAR 6 (no WEEK).
pub fn request_unit(n: i32) -> Option<Unit> {
    Some(match n {
        1 => Unit::Second,
        2 => Unit::Minute,
        3 => Unit::Hour,
        4 => Unit::Day,
        5 => Unit::Month,
        6 => Unit::Year,
        _ => return None,
    })
}

/// The response's unit enum (it has WEEK = 7).
pub fn response_unit(unit: Option<Unit>) -> PbUnit {
    match unit {
        Some(Unit::Second) => PbUnit::Second,
        Some(Unit::Minute) => PbUnit::Minute,
        Some(Unit::Hour) => PbUnit::Hour,
        Some(Unit::Day) => PbUnit::Day,
        Some(Unit::Week) => PbUnit::Week,
        Some(Unit::Month) => PbUnit::Month,
        Some(Unit::Year) => PbUnit::Year,
        None => PbUnit::Unknown,
    }
}

fn code(c: Code) -> PbCode {
    match c {
        Code::Ok => PbCode::Ok,
        Code::OverLimit => PbCode::OverLimit,
    }
}

/// The service's answer as a `RateLimitResponse`, with the reference's optional headers,
/// and its dynamic metadata when the request's part of it is given
/// ([`metadata::of_request`]).
pub fn response(
    r: &CheckResponse,
    headers: &Headers,
    request_metadata: Option<serde_json::Map<String, serde_json::Value>>,
) -> RateLimitResponse {
    RateLimitResponse {
        dynamic_metadata: request_metadata
            .map(|m| metadata::to_struct(&metadata::whole(m, r.metadata.as_ref()))),
        overall_code: code(r.overall) as i32,
        statuses: r.statuses.iter().map(status).collect(),
        response_headers_to_add: headers
            .reference_headers(r)
            .into_iter()
            .map(
                |(key, value)| envoy_types::pb::envoy::config::core::v3::HeaderValue {
                    key: key.to_string(),
                    value,
                    ..Default::default()
                },
            )
            .collect(),
        ..Default::default()
    }
}

fn status(s: &Status) -> DescriptorStatus {
    DescriptorStatus {
        code: code(s.code) as i32,
        current_limit: s.rule.as_ref().map(|rule| RateLimit {
            name: rule.name.as_deref().unwrap_or("").to_owned(),
            requests_per_unit: saturate(rule.requests_per_unit),
            unit: response_unit(rule.unit) as i32,
        }),
        limit_remaining: saturate(s.remaining),
        duration_until_reset: s.rule.as_ref().map(|_| PbDuration {
            seconds: i64::try_from(s.reset_seconds()).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        ..Default::default()
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
