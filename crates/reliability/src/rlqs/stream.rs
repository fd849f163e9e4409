//! The trial's Envoy-like streams: what one reports, what it reads, and a wait for the
//! service to see streams end.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{EVERY, Read};

/// Waits (10 s at most) until the service at `admin` has seen `closed` of the rated
/// bucket's holders end (`/v1/rlqs/explain`).
pub(super) async fn until_closed(admin: std::net::SocketAddr, closed: usize) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let body = serde_json::json!({ "domain": "reliability", "bucket": { "tenant": "shared" } });
    let seen = async {
        loop {
            let explained: serde_json::Value = client
                .post(format!("http://{admin}/v1/rlqs/explain"))
                .json(&body)
                .send()
                .await?
                .json()
                .await?;
            let ended = (explained["holders"].as_array().into_iter().flatten())
                .filter(|h| h["open"] == false)
                .count();
            if ended >= closed {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .map_err(|_| anyhow::anyhow!("the service never saw {closed} streams end"))?
}

/// One report: the rated bucket flooded (1,000 requests a second), the unlimited one.
pub(super) fn report() -> RateLimitQuotaUsageReports {
    let usage = |key: &str, value: &str| BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: [(key.to_string(), value.to_string())].into(),
        }),
        time_elapsed: Some(PbDuration {
            seconds: 0,
            nanos: EVERY.as_nanos() as i32,
        }),
        num_requests_allowed: 10,
        num_requests_denied: 90,
    };
    RateLimitQuotaUsageReports {
        domain: "reliability".into(),
        bucket_quota_usages: vec![usage("tenant", "shared"), usage("free", "x")],
    }
}

/// An Envoy-like stream from the address `from`: reports go in; a task reads every
/// answer into `reads`.
pub(super) struct Stream {
    pub(super) n: usize,
    pub(super) reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    stop: CancellationToken,
}

impl Stream {
    pub(super) async fn open(
        url: String,
        n: usize,
        from: std::net::IpAddr,
        start: Instant,
        reads: Arc<Mutex<Vec<Read>>>,
    ) -> anyhow::Result<Stream> {
        let channel = tonic::transport::Endpoint::from_shared(url)?
            .local_address(Some(from))
            .connect()
            .await?;
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, rx) = mpsc::channel(64);
        let outgoing =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
            );
        let mut answers = client
            .stream_rate_limit_quotas(outgoing)
            .await?
            .into_inner();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            loop {
                let answer = tokio::select! {
                    a = answers.message() => a,
                    () = stopped.cancelled() => break,
                };
                let answer: RateLimitQuotaResponse = match answer {
                    Ok(Some(a)) => a,
                    // An ended stream shows as answers that stop: judged as no recovery.
                    _ => break,
                };
                let at = start.elapsed();
                let (mut rated, mut free) = (None, false);
                for a in &answer.bucket_action {
                    let tenant = a
                        .bucket_id
                        .as_ref()
                        .is_some_and(|id| id.bucket.contains_key("tenant"));
                    let strategy = match &a.bucket_action {
                        Some(Action::QuotaAssignmentAction(q)) => {
                            q.rate_limit_strategy.as_ref().and_then(|s| s.strategy)
                        }
                        _ => None,
                    };
                    if tenant {
                        rated = Some(match strategy {
                            Some(Strategy::TokenBucket(b)) => {
                                let secs = b.fill_interval.map_or(1, |f| f.seconds.max(1));
                                let tokens = b.tokens_per_fill.map_or(0, |t| t.value);
                                Some(f64::from(tokens) / secs as f64)
                            }
                            _ => None,
                        });
                    } else {
                        free = true;
                    }
                }
                reads.lock().unwrap().push(Read {
                    at,
                    stream: n,
                    rated,
                    free,
                });
            }
        });
        Ok(Stream { n, reports, stop })
    }

    pub(super) fn close(self) {
        self.stop.cancel();
    }
}
