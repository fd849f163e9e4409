//! The Rate Limit Quota Service on two replicas of one Redis whose clocks disagree by
//! 30 s, twice an assignment's TTL: which shares are live is Redis's clock's call, so
//! the replica ahead never takes the other's holder for lapsed and shares out the
//! whole rate again.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use spillway_core::{Clock, SystemClock};
use tokio::sync::mpsc;
use tonic::Streaming;

use crate::support::envoy::spillway_seen;
use crate::support::{Procs, curl, free_port, plain};

const RATE: f64 = 10.0;
const POLICY: &str = "domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 10 }
";

/// One protocol client's stream, as an Envoy keeps it: reports in, answers out.
struct Stream {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: Streaming<RateLimitQuotaResponse>,
    /// The server's id of the stream, and how many answers were read of it.
    id: u64,
    received: u64,
    /// What the stream runs of the bucket now (requests a second).
    runs: f64,
}

impl Stream {
    async fn open(grpc: u16) -> Stream {
        let mut client = RateLimitQuotaServiceClient::connect(format!("http://127.0.0.1:{grpc}"))
            .await
            .unwrap();
        let (reports, rx) = mpsc::channel(4);
        let outgoing = tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(rx);
        let response = client.stream_rate_limit_quotas(outgoing).await.unwrap();
        let id = response.metadata().get("x-spillway-rlqs-stream").unwrap();
        Stream {
            reports,
            id: id.to_str().unwrap().parse().unwrap(),
            answers: response.into_inner(),
            received: 0,
            runs: 0.0,
        }
    }

    /// Reports 1,000 requests of the last second (far over any share) and reads every
    /// answer the server sent this stream: what it runs then.
    async fn report(&mut self, admin: u16) -> f64 {
        let usage = BucketQuotaUsage {
            bucket_id: Some(bucket()),
            time_elapsed: Some(PbDuration {
                seconds: 1,
                nanos: 0,
            }),
            num_requests_allowed: 1000,
            num_requests_denied: 0,
        };
        let report = RateLimitQuotaUsageReports {
            domain: "api".into(),
            bucket_quota_usages: vec![usage],
        };
        self.reports.send(report).await.unwrap();
        self.read().await;
        // Anything else the server says it sent (an answer it held back, then sent).
        while self.received < sent(admin, self.id) {
            self.read().await;
        }
        self.runs
    }

    async fn read(&mut self) {
        let answer = tokio::time::timeout(Duration::from_secs(10), self.answers.message())
            .await
            .expect("an answer within 10 s")
            .unwrap()
            .expect("the stream is open");
        self.received += 1;
        for action in answer.bucket_action {
            let Some(Action::QuotaAssignmentAction(q)) = action.bucket_action else {
                panic!("an assignment: {action:?}");
            };
            self.runs = runs(&q.rate_limit_strategy.unwrap().strategy.unwrap());
        }
    }
}

fn bucket() -> BucketId {
    BucketId {
        bucket: HashMap::from([("tenant".to_string(), "shared".to_string())]),
    }
}

/// What an Envoy runs of a strategy, requests a second.
fn runs(strategy: &Strategy) -> f64 {
    match strategy {
        Strategy::TokenBucket(b) => {
            let fill = b.fill_interval.unwrap();
            f64::from(b.tokens_per_fill.unwrap().value) / fill.seconds as f64
        }
        Strategy::BlanketRule(r) if *r == BlanketRule::DenyAll as i32 => 0.0,
        other => panic!("a token bucket or DENY_ALL: {other:?}"),
    }
}

/// `/v1/rlqs/explain` of the bucket through the replica at `admin`.
fn explain(admin: u16) -> serde_json::Value {
    let body = r#"{"domain":"api","bucket":{"tenant":"shared"}}"#;
    let answer = curl(admin, "/v1/rlqs/explain", Some(body));
    let (status, json) = answer.split_once(' ').unwrap();
    assert_eq!(status, "200", "{answer}");
    serde_json::from_str(json).unwrap()
}

/// How many answers the replica at `admin` sent its stream `id` (its own holders say;
/// another replica's, of the same number maybe, say nothing of it).
fn sent(admin: u16, id: u64) -> u64 {
    (explain(admin)["holders"].as_array().unwrap().iter())
        .find(|h| h["stream"].as_u64() == Some(id) && h["sent"].is_u64())
        .and_then(|h| h["sent"].as_u64())
        .unwrap_or(0)
}

/// Seconds of the day a log line's timestamp reads (`2026-12-02T10:02:19.724281Z …`).
fn time_of_day(line: &str) -> f64 {
    let line = plain(line);
    let time = &line[line.find('T').unwrap() + 1..line.find('Z').unwrap()];
    let parts: Vec<f64> = time.split(':').map(|p| p.parse().unwrap()).collect();
    parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
}

/// Two replicas of one Redis, the second started under libfaketime 30 s ahead (its log
/// says so); a protocol client with far more demand than the rate on each, reporting
/// in turn. At every report, what the two run adds up to no more than the rate, and
/// the bookings seen through either replica too; both are served (the split is fair:
/// each gets at least a quarter of the rate). Each replica's own clock used to decide
/// which holders were live: the one ahead took the other's for lapsed and the two ran
/// 9.5 + 9.5 of 10.
#[test]
fn replicas_whose_clocks_are_30_s_apart_share_out_no_more_than_the_rate() {
    let faketime = std::env::var("SPILLWAY_TEST_FAKETIME").expect(
        "SPILLWAY_TEST_FAKETIME is not set: run the suite with scripts/test, which installs \
         libfaketime (Debian's faketime) and exports its path",
    );
    let url = spillway_testkit::redis::standalone_url();
    let prefix = spillway_testkit::redis::unique_prefix("rlqs-skew");
    let mut procs = Procs(Vec::new());
    let mut replica = |skewed: &[(&str, &str)]| {
        let admin = free_port();
        let admin_addr = format!("127.0.0.1:{admin}");
        let env = [
            &[
                ("SPILLWAY_ADMIN_ADDR", admin_addr.as_str()),
                ("SPILLWAY_STORE", url.as_str()),
                ("SPILLWAY_KEY_PREFIX", prefix.as_str()),
                ("SPILLWAY_STORE_TIMEOUT", "1s"),
                ("TZ", "UTC"),
            ],
            skewed,
        ]
        .concat();
        let (grpc, _, seen) = spillway_seen(&mut procs, POLICY, &env);
        (grpc, admin, time_of_day(seen.last().unwrap()))
    };
    let (grpc, admin, _) = replica(&[]);
    let (ahead_grpc, ahead_admin, its_time) = replica(&[
        ("LD_PRELOAD", faketime.as_str()),
        ("FAKETIME", "+30s"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]);
    // Read after its line was written: the skew is at least what this says.
    let now = SystemClock.now().as_micros() as f64 / 1e6;
    let ahead = (its_time - now % 86_400.0).rem_euclid(86_400.0);
    assert!(
        (25.0..=35.0).contains(&ahead),
        "the replica is {ahead:.1} s ahead"
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (mut here, mut there) =
        runtime.block_on(async { (Stream::open(grpc).await, Stream::open(ahead_grpc).await) });
    let mut shares = [0.0, 0.0];
    for round in 0..8 {
        shares[0] = runtime.block_on(here.report(admin));
        shares[1] = runtime.block_on(there.report(ahead_admin));
        assert!(
            shares[0] + shares[1] <= RATE + 1e-9,
            "round {round}: the two run {shares:?} of {RATE}"
        );
        for a in [admin, ahead_admin] {
            let booked = explain(a)["booked_per_second"].as_f64().unwrap();
            assert!(booked <= RATE + 1e-9, "round {round}: {booked} booked");
        }
    }
    eprintln!("two replicas 30 s apart run {shares:?} of {RATE}");
    assert!(
        shares.iter().all(|&s| s >= RATE / 4.0),
        "both served: {shares:?}"
    );
}
