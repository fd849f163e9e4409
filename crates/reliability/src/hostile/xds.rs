//! Hostile xDS pushes: an ADS server that pushes, after a good set of rules, one set no
//! service should take (an empty domain, an unknown unit, descriptors nested past the
//! decoder's depth, an empty key, a push larger than `xds_max_message_bytes`). Each must
//! be refused (a NACK, or the stream ended for the oversized one) while the rules in
//! force keep deciding, with no panic.

use std::fmt;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
};
use spillway_server::Config;
use spillway_server::listen::Limits;
use spillway_testkit::ads::{Ads, Snapshot, gateway_config};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// What one push got.
#[derive(Clone, Debug)]
pub struct XdsOutcome {
    pub push: &'static str,
    /// The service's answer to it: its NACK's message, or that the stream ended.
    pub answer: String,
    /// The rules in force still decided: 2 allowed, then over the limit.
    pub rules_kept: bool,
}

impl XdsOutcome {
    /// Refused, and the rules kept.
    pub fn ok(&self) -> bool {
        !self.answer.is_empty() && self.rules_kept
    }
}

/// The hostile pushes, by name.
fn pushes() -> Vec<(&'static str, Vec<RateLimitConfig>)> {
    let good = gateway_config(2);
    let mut nested = RateLimitDescriptor {
        key: "leaf".into(),
        ..RateLimitDescriptor::default()
    };
    for _ in 0..200 {
        nested = RateLimitDescriptor {
            key: "k".into(),
            descriptors: vec![nested],
            ..RateLimitDescriptor::default()
        };
    }
    let huge: Vec<RateLimitDescriptor> = (0..40_000)
        .map(|i| RateLimitDescriptor {
            key: format!("k{i}"),
            value: "v".repeat(100),
            rate_limit: Some(RateLimitPolicy {
                unit: 2,
                requests_per_unit: 1,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        })
        .collect();
    vec![
        (
            "an empty domain",
            vec![RateLimitConfig {
                domain: String::new(),
                ..good.clone()
            }],
        ),
        (
            "unit 99",
            vec![RateLimitConfig {
                descriptors: vec![RateLimitDescriptor {
                    key: "k".into(),
                    rate_limit: Some(RateLimitPolicy {
                        unit: 99,
                        requests_per_unit: 1,
                        ..RateLimitPolicy::default()
                    }),
                    ..RateLimitDescriptor::default()
                }],
                ..good.clone()
            }],
        ),
        (
            "descriptors nested 200 deep",
            vec![RateLimitConfig {
                descriptors: vec![nested],
                ..good.clone()
            }],
        ),
        (
            "an empty descriptor key",
            vec![RateLimitConfig {
                descriptors: vec![RateLimitDescriptor::default()],
                ..good.clone()
            }],
        ),
        (
            "a push of 4.4 MiB (xds_max_message_bytes: 4 MiB)",
            vec![RateLimitConfig {
                descriptors: huge,
                ..good
            }],
        ),
    ]
}

/// Each push after the good rules, to a service that follows the ADS server.
pub async fn xds_pushes() -> anyhow::Result<Vec<XdsOutcome>> {
    super::count_panics();
    let mut outcomes = Vec::new();
    for (push, configs) in pushes() {
        let (snapshot_tx, snapshot) =
            watch::channel::<Snapshot>(Some(("1".into(), vec![gateway_config(2)])));
        let (requests_tx, mut requests) = mpsc::unbounded_channel::<DiscoveryRequest>();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        tokio::spawn(spillway_server::listen::serve(
            listener,
            Ads::new(snapshot, requests_tx).router().into_axum_router(),
            stop.clone(),
            Limits::new("ads"),
            None,
        ));
        let dir = std::env::temp_dir().join(format!("spillway-xds-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut config = Config::ephemeral(&dir);
        config.rules.xds.server = Some(addr.to_string());
        config.rules.xds.node_id = "hostile".into();
        config.rules.xds.backoff_initial = Duration::from_millis(100);
        let running = crate::trial::start(config).await?;
        // The first request, then the ACK of version 1.
        until(&mut requests, |r| r.version_info == "1").await;
        snapshot_tx.send(Some(("2".into(), configs)))?;
        let answer = match tokio::time::timeout(
            Duration::from_secs(10),
            until(&mut requests, |r| {
                r.response_nonce == "nonce-2"
                    || (r.version_info == "1" && r.response_nonce.is_empty())
            }),
        )
        .await
        {
            Ok(r) => match r.error_detail {
                Some(status) => status.message.chars().take(90).collect(),
                // A new stream (the oversized push ended the last): still version 1.
                None if r.version_info == "1" => {
                    "the stream ended; a new one asks again at version 1".into()
                }
                None => String::new(),
            },
            Err(_) => "no answer".into(),
        };
        let rules_kept = decides(&running).await;
        outcomes.push(XdsOutcome {
            push,
            answer,
            rules_kept,
        });
        running.stop().await;
        stop.cancel();
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(outcomes)
}

/// The next request that `wanted` says is the one.
async fn until(
    requests: &mut mpsc::UnboundedReceiver<DiscoveryRequest>,
    wanted: impl Fn(&DiscoveryRequest) -> bool,
) -> DiscoveryRequest {
    loop {
        let r = requests.recv().await.expect("the ADS server runs");
        if wanted(&r) {
            return r;
        }
    }
}

/// Version 1's rule (2 a minute) still decides: two allowed, the third over.
async fn decides(running: &spillway_server::Running) -> bool {
    let http = reqwest::Client::new();
    let body = r#"{"domain":"default/eg/http","descriptors":[{"entries":[{"key":"httproute/default/api/rule/0","value":"httproute/default/api/rule/0"},{"key":"rule-0-match-0"}]}]}"#;
    let mut codes = Vec::new();
    for _ in 0..3 {
        let Ok(r) = http
            .post(format!("http://{}/v1/check", running.http_addr))
            .body(body)
            .send()
            .await
        else {
            return false;
        };
        codes.push(r.status().as_u16());
    }
    codes == [200, 200, 429]
}

impl fmt::Display for XdsOutcome {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "| {} | {} | {} | {} |",
            self.push,
            self.answer.replace('|', "\\|"),
            if self.rules_kept { "yes" } else { "**no**" },
            if self.ok() { "yes" } else { "**no**" }
        )
    }
}

/// The table's header, for [`XdsOutcome`]'s rows.
pub const XDS_HEADER: &str =
    "| xDS push | the service's answer | rules in force kept | as it must |\n|---|---|---|---|";
