//! Envoy's Rate Limit Quota Service on the gRPC listener:
//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas` (one
//! task per stream, feeding its reports to `crate::rlqs::Quotas`), and
//! `POST /v1/rlqs/explain` on the admin listener.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::{
    BucketAction,
    bucket_action::{AbandonAction, BucketAction as PbAction, QuotaAssignmentAction},
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::r#type::v3::{
    RateLimitStrategy, TokenBucket,
    rate_limit_strategy::{BlanketRule, Strategy as PbStrategy},
};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use futures_util::Stream;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::respond;
use crate::metrics;
use crate::rlqs::{Action, Answer, Refusal, Report, Strategy, Usage};
use crate::service::CheckError;
use crate::state::AppState;

/// The most bytes one usage report may take, decoded: a thousand buckets of a few
/// pairs each fit.
pub const MAX_REPORT_BYTES: usize = 1024 * 1024;

/// The gRPC path every RLQS method is under.
pub(crate) const PATH_PREFIX: &str = "/envoy.service.rate_limit_quota.v3.";

/// The header of a stream's answers that says its id (as `/v1/rlqs/explain` shows it).
pub const STREAM_HEADER: &str = "x-spillway-rlqs-stream";

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
        let state = Arc::clone(&self.state);
        let (stream, wake) = state.quotas.open(peer).map_err(status)?;
        // The status that ends the stream, if one does; dropped when reports end.
        let (end, ended) = tokio::sync::mpsc::channel::<tonic::Status>(1);
        let shutdown = state.quotas.stopping();
        let reporting = Arc::clone(&state);
        tokio::spawn(async move {
            let state = reporting;
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
                    Err(e) => {
                        metrics::invalid_request("rlqs");
                        let said = tonic::Status::invalid_argument(format!(
                            "a usage report could not be read: {}",
                            e.message()
                        ));
                        let _ = end.send(said).await;
                        break;
                    }
                };
                let now = state.service.now();
                // Arcs, not guards: the report may wait on Redis.
                let book = crate::rlqs::Rulebook::of(&state.service);
                let report = state.quotas.report(stream, read(report), &book, now);
                if let Err(refusal) = report.await {
                    metrics::invalid_request("rlqs");
                    let _ = end.send(status(refusal)).await;
                    break;
                }
            }
            state.quotas.close(stream);
        });
        // Answers as the connection takes them: what waits for the stream when it can
        // be written (one per bucket, the newest), then the ending status, if any.
        let answers = futures_util::stream::unfold(Ending::Open(ended), move |ending| {
            let (state, wake) = (Arc::clone(&state), Arc::clone(&wake));
            async move {
                let mut ended = match ending {
                    Ending::Open(ended) => ended,
                    Ending::Then(status) => return status.map(|s| (Err(s), Ending::Then(None))),
                };
                loop {
                    let answers = deliver(&state, stream);
                    if !answers.is_empty() {
                        return Some((Ok(response(answers)), Ending::Open(ended)));
                    }
                    tokio::select! {
                        biased;
                        () = wake.notified() => {}
                        end = ended.recv() => {
                            let answers = deliver(&state, stream);
                            if answers.is_empty() {
                                return end.map(|s| (Err(s), Ending::Then(None)));
                            }
                            return Some((Ok(response(answers)), Ending::Then(end)));
                        }
                    }
                }
            }
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

/// The answers waiting for `stream`, as its connection takes them; the decreases among
/// them settled in the ledger on a task of their own (the stream does not wait on
/// Redis).
fn deliver(state: &Arc<AppState>, stream: u64) -> Vec<Answer> {
    let now = state.service.now();
    let (answers, settling) = state.quotas.deliver(stream, now);
    if !settling.is_empty() {
        let state = Arc::clone(state);
        tokio::spawn(async move { state.quotas.settle(settling, now).await });
    }
    answers
}

/// Where a stream's answers are: reports still come (the status that ends it, if one
/// does, comes here), or they ended and this status is the last thing sent.
enum Ending {
    Open(tokio::sync::mpsc::Receiver<tonic::Status>),
    Then(Option<tonic::Status>),
}

/// A refusal as the stream's status.
fn status(refusal: Refusal) -> tonic::Status {
    match refusal {
        Refusal::Invalid(why) => tonic::Status::invalid_argument(why),
        Refusal::TooManyStreams(max) => tonic::Status::resource_exhausted(format!(
            "{max} RLQS streams are open, the most this server takes (rlqs_max_streams)"
        )),
    }
}

/// A usage report in the state's terms.
pub fn read(report: RateLimitQuotaUsageReports) -> Report {
    Report {
        domain: report.domain,
        usages: (report.bucket_quota_usages.into_iter())
            .map(|u| Usage {
                bucket: u.bucket_id.map(|id| id.bucket.into_iter().collect()),
                allowed: u.num_requests_allowed,
                denied: u.num_requests_denied,
                elapsed: u.time_elapsed.map_or(Duration::ZERO, |d| {
                    Duration::new(
                        d.seconds.max(0) as u64,
                        d.nanos.clamp(0, 999_999_999) as u32,
                    )
                }),
            })
            .collect(),
    }
}

/// Answers as one response.
fn response(answers: Vec<Answer>) -> RateLimitQuotaResponse {
    RateLimitQuotaResponse {
        bucket_action: answers.into_iter().map(action).collect(),
    }
}

fn action(answer: Answer) -> BucketAction {
    let bucket_action = match answer.action {
        Action::Abandon => PbAction::AbandonAction(AbandonAction {}),
        Action::Assign { strategy, ttl } => {
            PbAction::QuotaAssignmentAction(QuotaAssignmentAction {
                assignment_time_to_live: Some(PbDuration {
                    seconds: ttl.as_secs() as i64,
                    nanos: 0,
                }),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(wire_strategy(strategy)),
                }),
            })
        }
    };
    BucketAction {
        bucket_id: Some(BucketId {
            bucket: answer.bucket.iter().cloned().collect(),
        }),
        bucket_action: Some(bucket_action),
    }
}

/// A strategy as Envoy 1.40 takes it. Envoy keeps its running token bucket when a new
/// one has the same `max_tokens`, `tokens_per_fill` and `fill_interval` *nanoseconds*
/// (it runs whole seconds, and compares no seconds), so the interval's nanoseconds
/// repeat its seconds: two intervals that differ look different (a few microseconds,
/// slower).
fn wire_strategy(strategy: Strategy) -> PbStrategy {
    match strategy {
        Strategy::AllowAll => PbStrategy::BlanketRule(BlanketRule::AllowAll as i32),
        Strategy::DenyAll => PbStrategy::BlanketRule(BlanketRule::DenyAll as i32),
        Strategy::TokenBucket { tokens, secs } => PbStrategy::TokenBucket(TokenBucket {
            max_tokens: tokens,
            tokens_per_fill: Some(UInt32Value { value: tokens }),
            fill_interval: Some(PbDuration {
                seconds: secs as i64,
                nanos: secs as i32,
            }),
        }),
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
    let book = crate::rlqs::Rulebook::of(&state.service);
    let explained = state.quotas.explain(
        &asked.domain,
        pairs.expect("checked above"),
        &book,
        state.service.now(),
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
