//! Asks a running Spillway (or any Envoy rate limit service) one `ShouldRateLimit`
//! question, the way Envoy does, and prints the answer.
//!
//! ```text
//! cargo run -p spillway-server --example grpc_client -- 127.0.0.1:8081 api api_key=k1
//! ```
//! Arguments: the gRPC address, the domain, then the descriptor's `key=value` entries.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: grpc_client ADDR DOMAIN KEY=VALUE...";
    let addr = args.next().ok_or(usage)?;
    let domain = args.next().ok_or(usage)?;
    let entries = args
        .map(|kv| {
            let (key, value) = kv.split_once('=').unwrap_or((&kv, ""));
            Entry {
                key: key.into(),
                value: value.into(),
            }
        })
        .collect();
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}")).await?;
    let request = RateLimitRequest {
        domain,
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..Default::default()
        }],
        hits_addend: 1,
    };
    let r = client.should_rate_limit(request).await?.into_inner();
    let name = |c: i32| Code::try_from(c).map_or("UNKNOWN", |c| c.as_str_name());
    println!("overall_code: {}", name(r.overall_code));
    for s in r.statuses {
        let limit = s
            .current_limit
            .map(|l| {
                format!(
                    "{} per unit {} (name `{}`)",
                    l.requests_per_unit, l.unit, l.name
                )
            })
            .unwrap_or_else(|| "none".into());
        let reset = s.duration_until_reset.map_or(0, |d| d.seconds);
        println!(
            "  {}: limit {limit}, remaining {}, reset in {reset}s",
            name(s.code),
            s.limit_remaining
        );
    }
    Ok(())
}
