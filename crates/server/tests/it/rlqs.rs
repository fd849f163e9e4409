//! The Rate Limit Quota Service over a real socket, with tonic's client: subscription
//! and assignment, shares that follow demand and never add up to more than the limit,
//! a closed stream's share held until its TTL, abandon, blanket rules, and malformed
//! reports refused or bounded with nothing lost. (A real Envoy: the CLI's
//! `envoy_rlqs.rs`.)

use crate::support;

mod beside;
mod bounds;
mod delivery;
mod replicas;

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
use spillway_core::{ManualClock, Timestamp};
use support::{Backing, Server};
use tokio::sync::mpsc;
use tonic::Streaming;

const POLICY: &str = "
domain: q
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 60 }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: free
    rate_limit: { unlimited: true }
";

/// One Envoy's stream: reports go in, answers come out; the stream's id (as the
/// server's header says it), the answers read, and the latest strategy of each bucket.
struct Envoy {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: Streaming<RateLimitQuotaResponse>,
    stream: u64,
    received: u64,
    latest: HashMap<Pairs, Option<Strategy>>,
}

impl Envoy {
    async fn subscribe(s: &Server) -> Envoy {
        Envoy::subscribe_from(s, [127, 0, 0, 1]).await
    }

    /// A stream from the loopback address `from` (another Envoy: another address).
    async fn subscribe_from(s: &Server, from: [u8; 4]) -> Envoy {
        Envoy::subscribe_with(s, from, None).await
    }

    /// A stream from `from` whose connection takes at most `window` bytes of answers
    /// it has not read (HTTP/2 flow control; `None`: the client's default, 2 MiB).
    async fn subscribe_with(s: &Server, from: [u8; 4], window: Option<u32>) -> Envoy {
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{}", s.running.grpc_addr))
                .unwrap()
                .local_address(Some(std::net::IpAddr::from(from)))
                .initial_stream_window_size(window)
                .initial_connection_window_size(window)
                .connect()
                .await
                .unwrap();
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, rx) = mpsc::channel(16);
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
            );
        let response = client.stream_rate_limit_quotas(stream).await.unwrap();
        let id = response.metadata().get("x-spillway-rlqs-stream").unwrap();
        Envoy {
            reports,
            stream: id.to_str().unwrap().parse().unwrap(),
            answers: response.into_inner(),
            received: 0,
            latest: HashMap::new(),
        }
    }

    /// Reports `usages` of domain `q` and reads its answer: every answer sent before
    /// it read first (no other stream reports meanwhile, so the next is this one's).
    async fn report(
        &mut self,
        s: &Server,
        usages: Vec<BucketQuotaUsage>,
    ) -> RateLimitQuotaResponse {
        if let Some(id) = usages.first().and_then(|u| u.bucket_id.clone()) {
            self.catch_up(s, &id).await;
        }
        self.send("q", usages).await;
        self.next().await
    }

    async fn send(&mut self, domain: &str, usages: Vec<BucketQuotaUsage>) {
        self.reports
            .send(RateLimitQuotaUsageReports {
                domain: domain.into(),
                bucket_quota_usages: usages,
            })
            .await
            .unwrap();
    }

    async fn next(&mut self) -> RateLimitQuotaResponse {
        let answer = tokio::time::timeout(Duration::from_secs(10), self.answers.message())
            .await
            .expect("an answer within 10 s")
            .unwrap()
            .expect("the stream is open");
        self.received += 1;
        self.latest.extend(strategies(&answer));
        answer
    }

    /// Reads every answer the server says it sent this stream (`/v1/rlqs/explain` of a
    /// bucket it holds).
    async fn catch_up(&mut self, s: &Server, id: &BucketId) {
        let sent = explain(s, id)
            .await
            .holders
            .iter()
            .find(|h| h.stream == self.stream && h.sent.is_some())
            .and_then(|h| h.sent)
            .unwrap_or(0);
        while self.received < sent {
            self.next().await;
        }
    }

    /// The rate this stream runs for `id` now.
    async fn rate(&mut self, s: &Server, id: &BucketId) -> f64 {
        self.catch_up(s, id).await;
        rate(&self.latest[&sorted(id)])
    }
}

#[derive(serde::Deserialize)]
struct Explained {
    booked_per_second: f64,
    holders: Vec<Holder>,
}

#[derive(serde::Deserialize)]
struct Holder {
    replica: String,
    stream: u64,
    /// `None` for a stream on another replica.
    open: Option<bool>,
    sent: Option<u64>,
    booked_per_second: f64,
}

async fn explain(s: &Server, id: &BucketId) -> Explained {
    let (status, body) = s
        .post(
            "/v1/rlqs/explain",
            &serde_json::json!({ "domain": "q", "bucket": id.bucket }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

fn bucket(pairs: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// A usage of `pairs`: `requests` allowed over `secs` seconds.
fn usage(pairs: &[(&str, &str)], requests: u64, secs: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(bucket(pairs)),
        time_elapsed: Some(PbDuration {
            seconds: secs,
            nanos: 0,
        }),
        num_requests_allowed: requests,
        num_requests_denied: 0,
    }
}

/// The strategies of an answer, by bucket.
fn strategies(answer: &RateLimitQuotaResponse) -> HashMap<Pairs, Option<Strategy>> {
    answer
        .bucket_action
        .iter()
        .map(|a| {
            let id = a.bucket_id.clone().unwrap();
            let strategy = match a.bucket_action.unwrap() {
                Action::QuotaAssignmentAction(q) => {
                    assert!(q.assignment_time_to_live.unwrap().seconds >= 1);
                    q.rate_limit_strategy.unwrap().strategy
                }
                Action::AbandonAction(_) => None,
            };
            (sorted(&id), strategy)
        })
        .collect()
}

type Pairs = Vec<(String, String)>;

fn sorted(id: &BucketId) -> Pairs {
    let mut pairs: Pairs = id.bucket.clone().into_iter().collect();
    pairs.sort();
    pairs
}

/// A token bucket's rate, requests a second.
fn rate(strategy: &Option<Strategy>) -> f64 {
    match strategy {
        Some(Strategy::TokenBucket(b)) => {
            let fill = b.fill_interval.unwrap();
            // Whole seconds, as Envoy 1.40 runs them; the nanoseconds repeat them, for
            // Envoy to see a change of interval.
            assert!(fill.seconds >= 1);
            assert_eq!(i64::from(fill.nanos), fill.seconds);
            let tokens = b.tokens_per_fill.unwrap().value;
            assert_eq!(b.max_tokens, tokens, "one fill at most at once");
            f64::from(tokens) / fill.seconds as f64
        }
        other => panic!("expected a token bucket, got {other:?}"),
    }
}

/// What a lone Envoy runs of the rule's 60: all of it but the floor kept for a
/// newcomer (95%), as a token bucket.
fn alone() -> f64 {
    use spillway_core::fair_share::{FLOOR, fair, token_bucket};
    let (tokens, secs) = token_bucket(fair(60.0, FLOOR, &[1.0], 1)[0]).unwrap();
    f64::from(tokens) / secs as f64
}

fn only(answer: &RateLimitQuotaResponse) -> Option<Strategy> {
    assert_eq!(answer.bucket_action.len(), 1, "{answer:?}");
    strategies(answer).into_values().next().unwrap()
}

#[tokio::test]
async fn a_lone_envoy_gets_the_whole_limit_and_blanket_rules_where_the_rule_says() {
    let s = Server::start("rlqs-lone", &[("q.yaml", POLICY)], Backing::Memory).await;
    let mut envoy = Envoy::subscribe(&s).await;
    // A new bucket, reported at once with no time elapsed.
    let answer = envoy
        .report(&s, vec![usage(&[("tenant", "a")], 1, 0)])
        .await;
    assert_eq!(rate(&only(&answer)), alone());
    // Its share, 95% of the rate, is in the share histogram (the recorder is the
    // process's: other tests' shares are there too, all below the whole but this one's
    // and the other lone Envoys').
    let text = s.get_text("/metrics").await;
    let series = |le: &str| {
        let name = format!("spillway_rlqs_share_ratio_bucket{{domain=\"q\",le=\"{le}\"}}");
        spillway_testkit::metric(&text, &name)
    };
    assert!(series("1") > series("0.9"), "{text}");
    let answer = envoy
        .report(
            &s,
            vec![
                usage(&[("blocked", "x")], 1, 0),
                usage(&[("free", "x")], 1, 0),
                usage(&[("nothing", "matches")], 1, 0),
            ],
        )
        .await;
    let by = strategies(&answer);
    // A bucket no rule matches is not answered (`rlqs_unmatched: no_answer`): Envoy's
    // own `no_assignment_behavior` decides.
    assert_eq!(by.len(), 2, "{answer:?}");
    let blanket = |rule: BlanketRule| Some(Strategy::BlanketRule(rule as i32));
    assert_eq!(
        by[&sorted(&bucket(&[("blocked", "x")]))],
        blanket(BlanketRule::DenyAll)
    );
    assert_eq!(
        by[&sorted(&bucket(&[("free", "x")]))],
        blanket(BlanketRule::AllowAll)
    );
}

/// A bucket's rate follows the override of its pairs (`PUT /v1/limits`) at its next
/// report, and the file's rule again once the override is removed.
#[tokio::test]
async fn a_buckets_rate_follows_its_override_at_the_next_report() {
    use spillway_core::fair_share::{FLOOR, fair, token_bucket};
    let lone = |limit: f64| {
        let (tokens, secs) = token_bucket(fair(limit, FLOOR, &[1.0], 1)[0]).unwrap();
        f64::from(tokens) / secs as f64
    };
    let s = Server::start("rlqs-override", &[("q.yaml", POLICY)], Backing::Memory).await;
    let mut envoy = Envoy::subscribe(&s).await;
    let report = |n| vec![usage(&[("tenant", "a")], n, 0)];
    assert_eq!(rate(&only(&envoy.report(&s, report(1)).await)), lone(60.0));
    let set = s
        .http
        .put(s.url("/v1/limits/q"))
        .json(&serde_json::json!({
            "entries": [{ "key": "tenant", "value": "a" }],
            "limits": [{ "algorithm": "fixed_window", "limit": 600, "window": "1s" }]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 200);
    assert_eq!(rate(&only(&envoy.report(&s, report(1)).await)), lone(600.0));
    let other = envoy
        .report(&s, vec![usage(&[("tenant", "b")], 1, 0)])
        .await;
    assert_eq!(
        rate(&only(&other)),
        lone(60.0),
        "another tenant keeps the file's"
    );
    let removed = s
        .http
        .delete(s.url("/v1/limits/q?entry=tenant=a"))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 200);
    assert_eq!(rate(&only(&envoy.report(&s, report(1)).await)), lone(60.0));
}

/// Three Envoys on one bucket: the shares follow the demand each reports and never add
/// up to more than the limit, as each Envoy runs them (read from what it was sent); one
/// joining takes from the others at once; one whose stream ends keeps its share counted
/// until its assignment's TTL, then the others get it.
#[tokio::test]
async fn shares_follow_demand_and_never_add_up_to_more_than_the_limit() {
    let s = Server::start("rlqs-shares", &[("q.yaml", POLICY)], Backing::Memory).await;
    let a = [("tenant", "shared")];
    let id = bucket(&a);
    let mut envoys = [
        Envoy::subscribe(&s).await,
        Envoy::subscribe(&s).await,
        Envoy::subscribe(&s).await,
    ];
    // Requests over 5 s: the busy one at 2× an even third, the far one far above.
    let demand = [200, 0, 5_000];
    async fn rates(s: &Server, envoys: &mut [Envoy], id: &BucketId) -> Vec<f64> {
        let mut rates = Vec::new();
        for e in envoys.iter_mut().filter(|e| e.received > 0) {
            rates.push(e.rate(s, id).await);
        }
        let total: f64 = rates.iter().sum();
        assert!(total <= 60.0, "{rates:?} add up to more than 60");
        let explained = explain(s, id).await;
        assert!(explained.booked_per_second <= 60.0 + 1e-9);
        rates
    }

    let alone = rate(&only(
        &envoys[0].report(&s, vec![usage(&a, demand[0], 5)]).await,
    ));
    assert_eq!(alone, self::alone(), "alone, all but a newcomer's floor");
    // The idle one joins: it has the floor kept for a newcomer at once. The busy one
    // is sent less at its next report; what its Envoy ran stays booked until its Envoy
    // takes the new share, then the booking comes down to it (the room is free at
    // once, not at its next report).
    envoys[1].send("q", vec![usage(&a, demand[1], 5)]).await;
    let sent = rate(&only(
        &envoys[0].report(&s, vec![usage(&a, demand[0], 5)]).await,
    ));
    assert!(sent < alone, "{sent} of {alone}");
    let busy = envoys[0].stream;
    let settled = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let explained = explain(&s, &id).await;
            let h = explained.holders.iter().find(|h| h.stream == busy).unwrap();
            assert!(explained.booked_per_second <= 60.0 + 1e-9);
            if h.booked_per_second < alone {
                return h.booked_per_second;
            }
            tokio::task::yield_now().await;
        }
    });
    let settled = settled.await.expect("the taken decrease is settled");
    assert!(
        settled >= sent,
        "never booked below what its Envoy runs: {settled}"
    );
    envoys[1].report(&s, vec![usage(&a, demand[1], 5)]).await;
    let r = rates(&s, &mut envoys, &id).await;
    assert!(r[0] < 60.0 && r[1] > 3.0, "{r:?}");
    envoys[2].send("q", vec![usage(&a, demand[2], 5)]).await;
    // Rounds of reports (each Envoy shrinks or grows at its own): the busy ones get
    // most of the limit. The far one is answered once there is room for it.
    for _ in 0..4 {
        for (e, d) in envoys.iter_mut().zip(demand) {
            e.catch_up(&s, &id).await;
            if e.received == 0 {
                e.send("q", vec![usage(&a, d, 5)]).await;
            } else {
                e.report(&s, vec![usage(&a, d, 5)]).await;
            }
        }
    }
    let r = rates(&s, &mut envoys, &id).await;
    assert!(r[1] < 10.0 && r[0] + r[2] > 45.0, "{r:?}");

    // The far one goes away: its share stays counted while its assignment lives...
    let [busy, idle, far] = envoys;
    let far_share = rate(&far.latest[&sorted(&id)]);
    let far_stream = far.stream;
    drop(far);
    // Until the server has seen the stream end it may still send it decreases (which
    // its Envoy, were it alive, would run): wait for that, then report.
    until_closed(&s, &id, far_stream).await;
    let mut envoys = [busy, idle];
    s.clock.advance(Duration::from_secs(1));
    for (e, d) in envoys.iter_mut().zip(demand) {
        e.report(&s, vec![usage(&a, d, 5)]).await;
    }
    let r = rates(&s, &mut envoys, &id).await;
    assert!(
        r.iter().sum::<f64>() + far_share <= 60.0,
        "{r:?} and {far_share}"
    );
    // ... and past its TTL and delivery grace (15 + 2 s) the others share the whole
    // limit: two rounds, each growing at its own report.
    s.clock.advance(Duration::from_secs(16));
    for _ in 0..2 {
        for (e, d) in envoys.iter_mut().zip(demand) {
            e.report(&s, vec![usage(&a, d, 5)]).await;
        }
    }
    let r = rates(&s, &mut envoys, &id).await;
    // (Each token bucket runs within 5% of its share.)
    let fair = spillway_core::fair_share::fair(60.0, 0.1, &[40.0, 0.0], 1);
    assert!(
        r[0] >= 0.95 * fair[0] && r[1] >= 0.95 * fair[1],
        "{r:?} of {fair:?}"
    );
    assert_eq!(explain(&s, &id).await.holders.iter().len(), 2);
}

/// Waits (10 s at most) until the server has seen `stream` end.
async fn until_closed(s: &Server, id: &BucketId, stream: u64) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while explain(s, id)
            .await
            .holders
            .iter()
            .any(|h| h.stream == stream && h.open == Some(true))
        {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the server sees the stream end");
}

/// An Envoy whose stream breaks and comes back (a network blip, a balancer's reset)
/// keeps its share: its new stream, from the same address, takes over the closed one's
/// (it was answered `DENY_ALL`: the closed stream's share, live until its TTL, left it
/// nothing). Another Envoy (another address) that finds the room held by a closed
/// stream is answered nothing (its Envoy keeps its own `no_assignment_behavior`), never
/// a denial, and gets its share once the closed one's lapses. On the memory store and
/// through Redis.
#[tokio::test]
async fn a_stream_that_breaks_and_comes_back_keeps_its_share() {
    for backing in [
        Backing::Memory,
        Backing::Redis(spillway_testkit::redis::standalone_url()),
    ] {
        let s = Server::start("rlqs-reconnect", &[("q.yaml", POLICY)], backing.clone()).await;
        let a = [("tenant", "reconnects")];
        let id = bucket(&a);
        let mut first = Envoy::subscribe(&s).await;
        let alone = rate(&only(&first.report(&s, vec![usage(&a, 300, 5)]).await));
        // (Less the floor kept for a newcomer.)
        assert!(
            (45.0..=60.0).contains(&alone),
            "{backing:?}: alone: {alone}"
        );
        let stream = first.stream;
        drop(first);
        until_closed(&s, &id, stream).await;

        s.clock.advance(Duration::from_secs(1));
        let mut again = Envoy::subscribe(&s).await;
        let kept = only(&again.report(&s, vec![usage(&a, 300, 5)]).await);
        assert_eq!(
            rate(&kept),
            alone,
            "{backing:?}: the same Envoy back: {kept:?}"
        );
        assert!(explain(&s, &id).await.booked_per_second <= 60.0 + 1e-9);
        let stream = again.stream;
        drop(again);
        until_closed(&s, &id, stream).await;

        // Another Envoy, while the closed stream's share lives: no answer.
        s.clock.advance(Duration::from_secs(1));
        let mut other = Envoy::subscribe_from(&s, [127, 0, 0, 2]).await;
        other.send("q", vec![usage(&a, 300, 5)]).await;
        let seen = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let explained = explain(&s, &id).await;
                // (Booked, its answer not sent yet: the report is still on its way.)
                if let Some(h) = (explained.holders.iter())
                    .find(|h| h.stream == other.stream)
                    .filter(|h| !(h.sent == Some(0) && h.booked_per_second > 0.0))
                {
                    return (
                        h.sent,
                        Some(h.booked_per_second),
                        explained.booked_per_second,
                    );
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the report is seen");
        // Withheld (nothing sent), or, on Redis, the room kept for a newcomer: never a
        // share of 0 (a DENY_ALL).
        let withheld = seen.0 == Some(0) && seen.1.is_none_or(|share| share == 0.0);
        let roomed = seen.0 == Some(1) && seen.1.is_some_and(|share| share > 0.0);
        assert!(withheld || roomed, "{backing:?}: {seen:?}");
        if roomed {
            other.next().await;
        }
        assert!(seen.2 <= 60.0 + 1e-9, "{backing:?}: {seen:?}");
        // Past the closed stream's TTL and delivery grace (15 + 2 s), the whole of it.
        s.clock.advance(Duration::from_secs(18));
        let after = only(&other.report(&s, vec![usage(&a, 300, 5)]).await);
        assert_eq!(rate(&after), alone, "{backing:?}: {after:?}");
        s.running.stop().await;
    }
}

/// A bucket reported with no request for `abandon_after` (5 minutes) is abandoned.
/// The reports come every 5 s, as Envoy's do (a holder not reported for its TTL is
/// forgotten by the server's upkeep, which reads the same manual clock).
#[tokio::test]
async fn an_idle_bucket_is_abandoned() {
    let s = Server::start("rlqs-abandon", &[("q.yaml", POLICY)], Backing::Memory).await;
    let mut envoy = Envoy::subscribe(&s).await;
    let b = [("tenant", "sleepy")];
    rate(&only(&envoy.report(&s, vec![usage(&b, 3, 0)]).await));
    for _ in 0..59 {
        s.clock.advance(Duration::from_secs(5));
        rate(&only(&envoy.report(&s, vec![usage(&b, 0, 5)]).await));
    }
    s.clock.advance(Duration::from_secs(5));
    assert_eq!(
        only(&envoy.report(&s, vec![usage(&b, 0, 5)]).await),
        None,
        "abandoned"
    );
    // A request again: a bucket like any new one.
    rate(&only(&envoy.report(&s, vec![usage(&b, 1, 0)]).await));
}

/// A report with no domain ends its stream with INVALID_ARGUMENT; so does one that
/// changes its stream's domain. Buckets with no id, or too large an id (17 pairs, a
/// key over 256 bytes), get no answer; a value of any length (a client's header) is
/// answered (#60: refused, it left Envoy to its `no_assignment_behavior`);
/// a flood of buckets is answered up to the stream's limit, and the buckets it held
/// before keep their assignments.
#[tokio::test]
async fn malformed_reports_are_refused_or_bounded_with_nothing_lost() {
    let s = Server::start("rlqs-malformed", &[("q.yaml", POLICY)], Backing::Memory).await;
    let mut envoy = Envoy::subscribe(&s).await;
    envoy.send("", vec![usage(&[("tenant", "a")], 1, 0)]).await;
    let ended = envoy.answers.message().await.unwrap_err();
    assert_eq!(ended.code(), tonic::Code::InvalidArgument, "{ended:?}");

    let mut envoy = Envoy::subscribe(&s).await;
    rate(&only(
        &envoy
            .report(&s, vec![usage(&[("tenant", "a")], 1, 0)])
            .await,
    ));
    envoy
        .send("other", vec![usage(&[("tenant", "a")], 1, 0)])
        .await;
    let ended = envoy.answers.message().await.unwrap_err();
    assert_eq!(ended.code(), tonic::Code::InvalidArgument, "{ended:?}");
    assert!(ended.message().contains("domain"), "{ended:?}");

    let mut envoy = Envoy::subscribe(&s).await;
    let wide: Vec<(String, String)> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
    let wide: Vec<(&str, &str)> = wide.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let long = "x".repeat(300);
    let answer = envoy
        .report(
            &s,
            vec![
                BucketQuotaUsage {
                    bucket_id: None,
                    ..usage(&[], 1, 0)
                },
                usage(&[], 1, 0),
                usage(&wide, 1, 0),
                usage(&[(&long, "v")], 1, 0),
                usage(&[("tenant", &long)], 1, 0),
                usage(&[("tenant", "kept")], 1, 0),
            ],
        )
        .await;
    let answered = strategies(&answer);
    assert_eq!(answered.len(), 2, "only the good buckets: {answer:?}");
    for pairs in [[("tenant", long.as_str())], [("tenant", "kept")]] {
        assert_eq!(rate(&answered[&sorted(&bucket(&pairs))]), alone());
    }

    // A flood: 2,000 new buckets in one report; 1,000 per stream, two already held.
    let names: Vec<String> = (0..2000).map(|i| format!("t{i}")).collect();
    let flood: Vec<BucketQuotaUsage> = names
        .iter()
        .map(|n| usage(&[("tenant", n.as_str())], 1, 0))
        .collect();
    let answer = envoy.report(&s, flood).await;
    assert_eq!(
        answer.bucket_action.len(),
        998,
        "up to the stream's 1,000 buckets"
    );
    let kept = envoy
        .report(&s, vec![usage(&[("tenant", "kept")], 1, 5)])
        .await;
    assert_eq!(
        rate(&only(&kept)),
        alone(),
        "a bucket held before keeps its assignment"
    );
}

fn id_map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    bucket(pairs).bucket
}
