//! Envoy's Rate Limit Quota Service on the gRPC listener:
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas` (one
//! task per stream, feeding its reports to `crate::rlqs::Quotas`), and
//! `POST /v1/rlqs/explain` on the admin listener.

use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use futures_util::Stream;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::respond;
use crate::metrics;
use crate::service::CheckError;
use crate::state::AppState;

/// The most bytes one usage report may take, decoded: a thousand buckets of a few
/// pairs each fit.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// The gRPC path every RLQS method is under.
pub(crate) const PATH_PREFIX: &str = "/envoy.service.rate_limit_quota.v3.";

/// The header of a stream's answers that says its id (as `/v1/rlqs/explain` shows it).
pub const STREAM_HEADER: &str = "x-spillway-rlqs-stream";

/// How many answers may wait for a stream that reads slowly; past them, an answer to
/// it is dropped (its next report brings another).
const OUTBOX: usize = 16;

/// The RLQS gRPC service over `state`.
pub fn server(state: Arc<AppState>) -> RateLimitQuotaServiceServer<Rlqs> {
    RateLimitQuotaServiceServer::new(Rlqs { state }).max_decoding_message_size(MAX_REPORT_BYTES)
}

pub struct Rlqs {
    state: Arc<AppState>,
}

type Answers = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: tonic::Request<tonic::Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<tonic::Response<Answers>, tonic::Status> {
        let peer = request.remote_addr().map(|a| a.ip());
        let mut reports = request.into_inner();
        let (outbox, answers) = tokio::sync::mpsc::channel(OUTBOX);
        let state = Arc::clone(&self.state);
        let stream = state.quotas.open(outbox.clone(), peer);
        let shutdown = state.quotas.stopping();
        tokio::spawn(async move {
            loop {
                let report = tokio::select! {
                    r = reports.message() => r,
                    () = shutdown.cancelled() => break,
                };
                let report = match report {
                    Ok(Some(report)) => report,
                    Ok(None) => break,
                    // A report that does not decode, or is over the bound: the stream
                    // ends saying so (a client that went away reads nothing).
                    Err(status) => {
                        metrics::invalid_request("rlqs");
                        let said = tonic::Status::invalid_argument(format!(
                            "a usage report could not be read: {}",
                            status.message()
                        ));
                        let _ = outbox.send(Err(said)).await;
                        break;
                    }
                };
                let now = state.service.now().as_micros();
                // An Arc, not a guard: the report may wait on Redis.
                let policies = arc_swap::Guard::into_inner(state.service.policies());
                if let Err(status) = state.quotas.report(stream, report, &policies, now).await {
                    metrics::invalid_request("rlqs");
                    let _ = outbox.send(Err(status)).await;
                    break;
                }
            }
            state.quotas.close(stream);
        });
        let answers = futures_util::stream::unfold(answers, |mut answers| async move {
            answers.recv().await.map(|a| (a, answers))
        });
        let mut response = tonic::Response::new(Box::pin(answers) as Answers);
        let id = stream
            .to_string()
            .parse()
            .expect("digits are a header value");
        response.metadata_mut().insert(STREAM_HEADER, id);
        Ok(response)
    }
}

/// `POST /v1/rlqs/explain`: `{"domain": …, "bucket": {"key": "value", …}}`, answered
/// with the bucket's rule, what each stream reporting it asked for and was given.
pub(super) async fn explain(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    metrics::request("explain");
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Asked {
        domain: String,
        bucket: std::collections::BTreeMap<String, String>,
    }
    let asked: Asked = match serde_json::from_slice(&body) {
        Ok(asked) => asked,
        Err(e) => {
            metrics::invalid_request("explain");
            return respond::v1_error(&CheckError::Invalid(format!(
                "expected {{\"domain\": \"…\", \"bucket\": {{\"key\": \"value\", …}}}}: {e}"
            )));
        }
    };
    let pairs =
        crate::rlqs::bucket_pairs(asked.bucket.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let bad = match &pairs {
        _ if asked.domain.is_empty() => Some("the domain is empty".to_string()),
        _ if asked.domain.len() > crate::service::request::MAX_DOMAIN_LEN => Some(format!(
            "the domain is {} bytes, the most is {}",
            asked.domain.len(),
            crate::service::request::MAX_DOMAIN_LEN
        )),
        None => Some("the bucket has more than 16 pairs, or a key over 256 bytes".to_string()),
        Some(_) => None,
    };
    if let Some(bad) = bad {
        metrics::invalid_request("explain");
        return respond::v1_error(&CheckError::Invalid(bad));
    }
    let policies = arc_swap::Guard::into_inner(state.service.policies());
    let explained = state.quotas.explain(
        &asked.domain,
        pairs.expect("checked above"),
        &policies,
        state.service.now().as_micros(),
    );
    match explained.await {
        Ok(explained) => Json(explained).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "RLQS explain: the shares could not be read from Redis");
            respond::v1_error(&CheckError::Unavailable(
                "the bucket's shares live in Redis, which did not answer".into(),
            ))
        }
    }
}
