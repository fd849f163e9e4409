//! Hostile input on the Rate Limit Quota Service's stream
//! (`StreamRateLimitQuotas`, the gRPC listener): each case is one stream carrying one
//! message (a usage report's bytes as they are, so they need not decode), then
//! half-closed.
//! Bad domains and bucket ids that cannot be kept end the stream with
//! `INVALID_ARGUMENT` or get no answer for the bucket (Envoy then applies its
//! `no_assignment_behavior`), never a share, a panic or a store call; a long bucket
//! value is answered (kept as its digest) and a flood of buckets is answered up to
//! `rlqs_max_buckets`. And a stream that never reads its answers: its reports are all
//! decided, the answers kept for it are bounded, and another stream is answered
//! meanwhile.

use std::time::Duration;

use bytes::{Buf, Bytes};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prost::Message;

use super::cases::{decided, refused};
use super::{Api, Case, Outcome, Sender};

/// A rated domain for these cases: 10 requests a second per tenant.
pub(super) const RLQS_POLICY: &str = "\
domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 10 }
";

/// The stream's method on the gRPC listener.
const PATH: &str = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// A usage report of `domain` for `buckets` (each a bucket id's pairs), 5 requests
/// each, over a second.
fn report(domain: &str, buckets: &[Vec<(String, String)>]) -> Vec<u8> {
    RateLimitQuotaUsageReports {
        domain: domain.into(),
        bucket_quota_usages: buckets
            .iter()
            .map(|pairs| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: pairs.iter().cloned().collect(),
                }),
                time_elapsed: Some(envoy_types::pb::google::protobuf::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                num_requests_allowed: 5,
                num_requests_denied: 0,
            })
            .collect(),
    }
    .encode_to_vec()
}

fn tenant(value: &str) -> Vec<(String, String)> {
    vec![("tenant".into(), value.into())]
}

/// The cases, refused (no answer, or `INVALID_ARGUMENT`) unless they say they are
/// decided.
pub fn rlqs_cases() -> Vec<Case> {
    let many_pairs: Vec<_> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
    let flood: Vec<_> = (0..10_000).map(|i| tenant(&format!("t{i}"))).collect();
    // A report over the 1 MiB bound: one bucket value of 1 MiB.
    let oversized = report("quota", &[tenant(&"v".repeat(1 << 20))]);
    vec![
        decided(
            "RLQS: control: a valid report",
            Api::Rlqs,
            &report("quota", &[tenant("acme")]),
        ),
        decided(
            "RLQS: a bucket value of 2,000 bytes (decided: a digest)",
            Api::Rlqs,
            &report("quota", &[tenant(&"v".repeat(2000))]),
        ),
        decided(
            "RLQS: 10,000 buckets in one report (the first 1,000 answered)",
            Api::Rlqs,
            &report("quota", &flood),
        ),
        refused(
            "RLQS: empty domain",
            Api::Rlqs,
            &report("", &[tenant("acme")]),
        ),
        refused(
            "RLQS: a domain of 1,000 bytes (limit 256)",
            Api::Rlqs,
            &report(&"d".repeat(1000), &[tenant("acme")]),
        ),
        refused(
            "RLQS: a bucket id of 17 pairs (limit 16)",
            Api::Rlqs,
            &report("quota", &[many_pairs]),
        ),
        refused(
            "RLQS: a bucket key of 2,000 bytes (limit 256)",
            Api::Rlqs,
            &report("quota", &[vec![("k".repeat(2000), "v".into())]]),
        ),
        refused(
            "RLQS: a bucket id with no pairs",
            Api::Rlqs,
            &report("quota", &[Vec::new()]),
        ),
        refused("RLQS: a report over 1 MiB", Api::Rlqs, &oversized),
        refused(
            "RLQS: not protobuf",
            Api::Rlqs,
            b"\xff\xff\xff\xff not a report",
        ),
    ]
}

/// The gRPC messages framed in `body`, as many as are whole.
fn messages(mut body: Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if body.len() < 5 + len {
            break;
        }
        body.advance(5);
        out.push(body.split_to(len));
    }
    out
}

/// `message` framed as one gRPC message.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    frame
}

impl Sender {
    /// One stream carrying `message` (its bytes as they are, framed), half-closed: its status
    /// (`0 OK, N answered`: the buckets the answers named), the message, and whether
    /// it is a server fault.
    pub(super) async fn rlqs(&self, message: &[u8]) -> (String, String, bool) {
        let Some((code, message, answers)) = self.rlqs_stream(framed(message)).await else {
            return ("no answer".into(), String::new(), true);
        };
        let fault = !matches!(code, 0 | 3 | 8);
        if code != 0 {
            return (format!("{code} {}", super::grpc_name(code)), message, fault);
        }
        let message = if answers == 0 {
            "no assignment for the bucket (Envoy applies its no_assignment_behavior)".into()
        } else {
            message
        };
        (format!("0 OK, {answers} answered"), message, fault)
    }

    /// The stream's gRPC status code, message, and the buckets its answers named.
    async fn rlqs_stream(&self, body: Vec<u8>) -> Option<(i32, String, usize)> {
        let request = hyper::Request::post(format!("http://{}{PATH}", self.grpc_addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from(body)))
            .expect("a request");
        let response = self.h2.request(request).await.ok()?;
        let mut headers = response.headers().clone();
        let collected = response.into_body().collect().await.ok()?;
        if let Some(trailers) = collected.trailers() {
            headers.extend(trailers.clone());
        }
        let answers: usize = messages(collected.to_bytes())
            .into_iter()
            .filter_map(|m| RateLimitQuotaResponse::decode(m).ok())
            .map(|r| r.bucket_action.len())
            .sum();
        let (code, message) = super::grpc_status(&headers);
        Some((code, message, answers))
    }
}

/// The reports a stream that never reads sends.
const UNREAD: usize = 10_000;

/// A stream that sends 10,000 reports and reads nothing until it has sent them all,
/// while another stream reports: every report is decided (store calls), at most a
/// bounded number of answers wait for it (past 16 queued, the service drops an answer:
/// the next report brings another), and the other stream is answered within 5 s.
pub(super) async fn never_reads(sender: &Sender, store_calls: impl AsyncFn() -> u64) -> Outcome {
    let class = format!("RLQS: a stream that never reads, {UNREAD} reports");
    let before = store_calls().await;
    // A bucket value of 200 bytes: 10,000 answers (3 MB) are more than the windows
    // and the service's send buffer hold.
    let one = framed(&report("quota", &[tenant(&"u".repeat(200))]));
    let body: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * UNREAD)
        .collect();
    let request = hyper::Request::post(format!("http://{}{PATH}", sender.grpc_addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(body)))
        .expect("a request");
    // HTTP/2 windows as small as the protocol's default: the answers it does not
    // read soon stop the service's sending.
    let small: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .http2_initial_stream_window_size(65_535)
        .http2_initial_connection_window_size(65_535)
        .build_http();
    let unread = small.request(request);
    let other = framed(&report("quota", &[tenant("other")]));
    let (unread, other) = tokio::join!(
        unread,
        tokio::time::timeout(Duration::from_secs(5), sender.rlqs_stream(other))
    );
    let other_answered = matches!(other, Ok(Some((0, _, 1))));
    // Read only once every report was decided (a store call each; 30 s at most): what
    // waited for it.
    for _ in 0..300 {
        if store_calls().await - before > UNREAD as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kept = match unread {
        Ok(response) => match response.into_body().collect().await {
            Ok(collected) => Some(messages(collected.to_bytes()).len()),
            Err(_) => None,
        },
        Err(_) => None,
    };
    let store_calls = store_calls().await - before;
    let bounded = kept.is_some_and(|k| k < UNREAD);
    Outcome {
        class,
        api: Api::Rlqs,
        status: match kept {
            Some(k) => format!("0 OK, {k} of {UNREAD} answers kept"),
            None => "no answer".into(),
        },
        message: format!(
            "another stream {}",
            if other_answered {
                "answered within 5 s"
            } else {
                "NOT answered within 5 s"
            }
        ),
        server_fault: !bounded || !other_answered || store_calls < UNREAD as u64,
        store_calls,
        valid: true,
    }
}
