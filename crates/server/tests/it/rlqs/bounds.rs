//! What a client can make the RLQS server keep or answer, bounded: a bucket no rule
//! matches gets what `rlqs_unmatched` says (and explain names the pair that did not
//! match), streams past `rlqs_max_streams` are refused, and made-up domains grow no
//! series in `/metrics`.

use super::*;

use spillway_server::config::Unmatched;

/// A bucket whose pairs the policy does not know (a constant pair beside a known one,
/// as the proto's own example has), and a domain nobody configured: answered as the
/// setting says — nothing (Envoy's own `no_assignment_behavior` decides), ALLOW_ALL or
/// DENY_ALL — and explain says which pair did not match.
#[tokio::test]
async fn an_unmatched_bucket_gets_what_the_setting_says_and_explain_names_the_pair() {
    let blanket = |rule: BlanketRule| Some(Strategy::BlanketRule(rule as i32));
    let stray = [("name", "constant"), ("tenant", "a")];
    for (setting, want) in [
        (Unmatched::NoAnswer, None),
        (Unmatched::Allow, Some(blanket(BlanketRule::AllowAll))),
        (Unmatched::Deny, Some(blanket(BlanketRule::DenyAll))),
    ] {
        let files = [("q.yaml", POLICY)];
        let s = Server::start_with("rlqs-unmatched", &files, Backing::Memory, |c| {
            c.rlqs.unmatched = setting;
        })
        .await;
        let mut envoy = Envoy::subscribe(&s).await;
        // With a known bucket, so that every report has an answer to read.
        let known = usage(&[("tenant", "a")], 1, 0);
        let answer = envoy.report(&s, vec![known, usage(&stray, 1, 0)]).await;
        let by = strategies(&answer);
        assert_eq!(
            by.get(&sorted(&bucket(&stray))).cloned(),
            want,
            "{setting:?}"
        );
        let mut other = Envoy::subscribe(&s).await;
        other
            .send("nobody", vec![usage(&[("tenant", "a")], 1, 0)])
            .await;
        if let Some(want) = want {
            assert_eq!(only(&other.next().await), want, "{setting:?}");
        }

        let (status, body) = s
            .post(
                "/v1/rlqs/explain",
                &serde_json::json!({ "domain": "q", "bucket": id_map(&stray) }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["rule"]["strategy"], "unmatched", "{body}");
        assert_eq!(body["unmatched"]["reason"], "pairs", "{body}");
        assert_eq!(
            body["unmatched"]["pairs"],
            serde_json::json!({ "name": "constant" }),
            "{body}"
        );
        let (_, body) = s
            .post(
                "/v1/rlqs/explain",
                &serde_json::json!({ "domain": "nobody", "bucket": { "tenant": "a" } }),
            )
            .await;
        assert_eq!(body["unmatched"]["reason"], "domain", "{body}");
    }
}

/// At most `rlqs_max_streams` open: one more is refused `RESOURCE_EXHAUSTED` (and
/// counted); once some end, new ones are taken. 10,000 streams in turn, each of a
/// made-up domain, grow `/metrics` by a bounded number of lines, and no series names
/// any of their domains.
#[tokio::test]
async fn streams_past_the_bound_are_refused_and_made_up_domains_grow_no_series() {
    const MAX: usize = 8;
    let files = [("q.yaml", POLICY)];
    let s = Server::start_with("rlqs-streams", &files, Backing::Memory, |c| {
        c.rlqs.max_streams = MAX;
        // Every report then has an answer to wait for.
        c.rlqs.unmatched = Unmatched::Allow;
    })
    .await;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", s.running.grpc_addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let client = RateLimitQuotaServiceClient::new(channel);
    // One stream of `domain` (its first report answered, so it is in the books), or
    // the status that refused it.
    let open = |domain: String| {
        let mut client = client.clone();
        async move {
            let (reports, rx) = mpsc::channel(1);
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|r| (r, rx))
            });
            let mut answers = client.stream_rate_limit_quotas(stream).await?.into_inner();
            let report = RateLimitQuotaUsageReports {
                domain,
                bucket_quota_usages: vec![usage(&[("tenant", "a")], 1, 0)],
            };
            reports.send(report).await.unwrap();
            answers.message().await?.expect("an answer");
            Ok::<_, tonic::Status>((reports, answers))
        }
    };
    let before = s.get_text("/metrics").await;
    let refused =
        |text: &str| spillway_testkit::metric(text, "spillway_rlqs_refused_streams_total");

    let mut held = Vec::new();
    for i in 0..MAX {
        held.push(open(format!("made-up-{i}")).await.unwrap());
    }
    let Err(past) = open("made-up-past".into()).await else {
        panic!("a stream past the bound was taken");
    };
    assert_eq!(past.code(), tonic::Code::ResourceExhausted, "{past:?}");
    held.clear();

    for i in 0..10_000 {
        let domain = format!("made-up-{i}-{}", rand::random::<u32>());
        // A stream just ended may not be closed on the server yet: refused, then taken.
        loop {
            match open(domain.clone()).await {
                Ok(_) => break,
                Err(e) if e.code() == tonic::Code::ResourceExhausted => {
                    tokio::task::yield_now().await;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    let after = s.get_text("/metrics").await;
    assert!(refused(&after) > refused(&before), "the refusal is counted");
    assert!(
        !after.contains("made-up"),
        "a made-up domain became a label"
    );
    let grown = after.lines().count().saturating_sub(before.lines().count());
    // A series per domain would be 10,000 lines or more. The recorder is the process's:
    // other tests running beside this one add their own series meanwhile (tens of lines
    // each), so the bound is an order of magnitude below the domains, not an exact count.
    assert!(grown < 1_000, "/metrics grew by {grown} lines");
}
