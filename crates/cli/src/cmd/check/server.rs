//! `spillway check --server`: one question to a running service, over gRPC as Envoy asks
//! it or over `POST /v1/check`, printed for a person or as JSON (one shape for both).

use std::process::ExitCode;

use anyhow::{Context, bail};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, rate_limit::Unit};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{Value, json};

use super::{Answer, CheckArgs, Verdict};
use crate::client::Server;

/// One descriptor's answer, whichever API gave it.
struct Reply {
    code: String,
    rule: Option<String>,
    limit: Option<u64>,
    /// The most `remaining` can be: `/v1/check` says it; Envoy's gRPC answer has no
    /// field for it (a burst above the limit).
    capacity: Option<u64>,
    unit: Option<String>,
    /// The window, when it is no unit of Envoy's (`/v1/check` only).
    window_ms: Option<u64>,
    remaining: u64,
    reset_after_ms: Option<u64>,
    retry_after_ms: Option<u64>,
}

pub async fn run(args: &CheckArgs, url: &str) -> anyhow::Result<ExitCode> {
    let domain = args
        .domain
        .as_deref()
        .context("--domain is required with --server")?;
    let entries = crate::cmd::entries(&args.keys);
    let (cost, usage) = args.charge();
    let ask = async {
        match Server::parse(url)? {
            Server::Grpc { .. } if usage => bail!(
                "--usage asks over HTTP: Envoy's protocol has no usage flag (a `metered` \
                 rule takes --cost as usage over gRPC)"
            ),
            Server::Grpc { authority, tls } => {
                let channel = args.tls.grpc_channel(&authority, tls).await?;
                grpc(channel, url, &args.tls, domain, &entries, cost).await
            }
            Server::Http { .. } => http(args, url, domain, &entries, cost, usage).await,
        }
    };
    let (overall, answer) = tokio::time::timeout(args.timeout, ask)
        .await
        .map_err(|_| anyhow::anyhow!("{url} did not answer within {:?}", args.timeout))??;

    let allowed = overall == "OK";
    if args.json {
        println!(
            "{}",
            json!({ "allowed": allowed, "overall_code": overall, "domain": domain, "descriptors": [to_json(&answer, &entries)] })
        );
    } else {
        println!("{}", describe(&answer, &entries, cost, usage));
    }
    Ok(if allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn grpc(
    channel: tonic::transport::Channel,
    url: &str,
    tls: &crate::args::ClientTls,
    domain: &str,
    entries: &[(String, String)],
    cost: u64,
) -> anyhow::Result<(String, Reply)> {
    let mut client = RateLimitServiceClient::new(channel);
    let request = RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            // Per descriptor, so that 0 means "look" (a request-level 0 means 1).
            hits_addend: Some(UInt64Value { value: cost }),
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let r = client
        .should_rate_limit(request)
        .await
        .map_err(|s| crate::client::grpc_failure(url, &s, tls))?
        .into_inner();
    let name = |c: i32| {
        Code::try_from(c)
            .map_or("UNKNOWN", |c| c.as_str_name())
            .to_owned()
    };
    let s = r
        .statuses
        .into_iter()
        .next()
        .context("the answer has no status")?;
    let limit = s.current_limit.as_ref();
    Ok((
        name(r.overall_code),
        Reply {
            code: name(s.code),
            rule: limit.map(|l| l.name.clone()).filter(|n| !n.is_empty()),
            limit: limit.map(|l| u64::from(l.requests_per_unit)),
            capacity: None,
            window_ms: None,
            unit: limit.map(|l| {
                Unit::try_from(l.unit)
                    .map_or("UNKNOWN", |u| u.as_str_name())
                    .to_lowercase()
            }),
            remaining: u64::from(s.limit_remaining),
            reset_after_ms: s
                .duration_until_reset
                .map(|d| d.seconds.max(0) as u64 * 1000),
            retry_after_ms: None,
        },
    ))
}

async fn http(
    args: &CheckArgs,
    url: &str,
    domain: &str,
    entries: &[(String, String)],
    cost: u64,
    usage: bool,
) -> anyhow::Result<(String, Reply)> {
    let mut body = crate::cmd::descriptor_body(domain, entries, cost);
    if usage {
        body["usage"] = json!(true);
    }
    let v =
        crate::cmd::post_descriptor(url, &args.tls, None, "/v1/check", &body, args.timeout).await?;
    let d = &v["descriptors"][0];
    let rule = d.get("rule").filter(|r| !r.is_null());
    Ok((
        v["overall_code"].as_str().unwrap_or("UNKNOWN").to_owned(),
        Reply {
            code: d["code"].as_str().unwrap_or("UNKNOWN").to_owned(),
            rule: rule.and_then(|r| r["name"].as_str()).map(str::to_owned),
            limit: rule.and_then(|r| r["limit"].as_u64()),
            capacity: rule.and_then(|r| r["capacity"].as_u64()),
            window_ms: rule.and_then(|r| r["window_ms"].as_u64()),
            unit: rule.and_then(|r| r["unit"].as_str()).map(str::to_owned),
            remaining: d["remaining"].as_u64().unwrap_or(0),
            reset_after_ms: d["reset_after_ms"].as_u64(),
            retry_after_ms: d["retry_after_ms"].as_u64(),
        },
    ))
}

fn to_json(a: &Reply, entries: &[(String, String)]) -> Value {
    json!({
        "entries": entries.iter().map(|(k, v)| json!({ "key": k, "value": v })).collect::<Vec<_>>(),
        "code": a.code,
        "rule": a.rule,
        "limit": a.limit,
        "capacity": a.capacity,
        "unit": a.unit,
        "remaining": a.remaining,
        "reset_after_ms": a.reset_after_ms,
        "retry_after_ms": a.retry_after_ms,
    })
}

/// The sentence `check` prints from a store too ([`super::Answer`]).
fn describe(a: &Reply, entries: &[(String, String)], cost: u64, usage: bool) -> String {
    let subject: Vec<String> = entries.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let verdict = match (a.limit, a.code.as_str()) {
        (None, _) => Verdict::NoLimit,
        (_, "OK") => Verdict::Allowed,
        _ => Verdict::Denied {
            retry_after_ms: a.retry_after_ms,
        },
    };
    Answer {
        subject: &subject.join(" "),
        verdict,
        peek: cost == 0,
        cost,
        usage,
        rule: a.rule.as_deref(),
        remaining: a.remaining,
        capacity: a.capacity,
        rate: a.limit.map(|n| match (&a.unit, a.window_ms) {
            (Some(unit), _) => format!("{n} per {unit}"),
            (None, Some(ms)) => format!(
                "{n} per {}",
                spillway_policy::duration::format(std::time::Duration::from_millis(ms))
            ),
            (None, None) => n.to_string(),
        }),
        reset_after_ms: a.reset_after_ms,
    }
    .sentence()
}
