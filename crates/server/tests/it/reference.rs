//! The reference service's semantics, over gRPC, on its own example configuration: epoch
//! windows, hits counted over the limit, replaces, unlimited, shadow, wildcards,
//! hits_addend 0, overrides, unknown domains and the errors for empty requests.

use crate::support;

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use support::{Backing, Server, T0, backings, descriptor, example, request};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_example_over_grpc() {
    for backing in backings() {
        let s = Server::start(
            "reference",
            &[("rl.yaml", &example("envoy/rl.yaml"))],
            backing.clone(),
        )
        .await;
        // T0 is 20 s into a minute: 40 s until the window ends.
        s.advance(Duration::from_secs(0));

        // foo: 2 per minute, fixed window aligned to the epoch.
        let r = s.should("rl", &[("foo", "a")]).await;
        assert_eq!(r.overall_code, OK, "{backing:?}");
        let st = &r.statuses[0];
        assert_eq!(st.limit_remaining, 1);
        assert_eq!(st.current_limit.as_ref().unwrap().requests_per_unit, 2);
        assert_eq!(
            st.duration_until_reset.as_ref().unwrap().seconds,
            60 - (T0 % 60) as i64
        );
        assert_eq!(
            s.should("rl", &[("foo", "a")]).await.statuses[0].limit_remaining,
            0
        );
        let over = s.should("rl", &[("foo", "a")]).await;
        assert_eq!(
            (
                over.overall_code,
                over.statuses[0].code,
                over.statuses[0].limit_remaining
            ),
            (OVER, OVER, 0)
        );
        // Another value of the same key has its own counter.
        assert_eq!(s.should("rl", &[("foo", "b")]).await.overall_code, OK);

        // hits_addend 0 checks without consuming: over because the count is above the limit.
        let mut peek = request("rl", &[&[("foo", "a")]]);
        peek.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
        assert_eq!(s.ask(peek.clone()).await.overall_code, OVER);
        // On a fresh key at exactly the limit, hits_addend 0 is OK with 0 remaining.
        s.should("rl", &[("foo", "c")]).await;
        s.should("rl", &[("foo", "c")]).await;
        peek.descriptors[0].entries[0].value = "c".into();
        let at_limit = s.ask(peek).await;
        assert_eq!(
            (at_limit.overall_code, at_limit.statuses[0].limit_remaining),
            (OK, 0)
        );

        // The next epoch-aligned minute starts afresh (not 60 s after the first hit).
        s.advance(Duration::from_secs(60 - T0 % 60));
        assert_eq!(
            s.should("rl", &[("foo", "a")]).await.statuses[0].limit_remaining,
            1
        );

        // requests_per_unit 0 blocks; unlimited admits with remaining u32::MAX and no limit.
        assert_eq!(
            s.should("rl", &[("foo", "x"), ("bar", "banned")])
                .await
                .overall_code,
            OVER
        );
        let unlimited = s.should("rl", &[("foo", "x"), ("bay", "y")]).await;
        assert_eq!(
            (
                unlimited.statuses[0].limit_remaining,
                unlimited.statuses[0].current_limit.is_none()
            ),
            (u32::MAX, true)
        );
        // Shadow mode: over the limit, still OK.
        for _ in 0..3 {
            let shady = s.should("rl", &[("foo", "x"), ("baz", "shady")]).await;
            assert_eq!((shady.overall_code, shady.statuses[0].code), (OK, OK));
        }
        // No rule: OK, no limit. Deeper than the config: no rule.
        let none = s.should("rl", &[("nope", "x")]).await;
        assert_eq!(
            (none.overall_code, none.statuses[0].current_limit.is_none()),
            (OK, true)
        );

        // One over-limit descriptor makes the whole request over the limit.
        let both = s
            .ask(request("rl", &[&[("foo", "a")], &[("foo", "zz")]]))
            .await;
        s.ask(request("rl", &[&[("foo", "a")]])).await;
        let both_again = s
            .ask(request("rl", &[&[("foo", "a")], &[("foo", "zz")]]))
            .await;
        assert_eq!(both.overall_code, OK);
        assert_eq!(both_again.overall_code, OVER);
        assert_eq!(
            both_again
                .statuses
                .iter()
                .map(|s| s.code)
                .collect::<Vec<_>>(),
            [OVER, OK]
        );

        // Unknown domain: OK, one empty status per descriptor.
        let unknown = s
            .ask(request("nope", &[&[("a", "b")], &[("c", "d")]]))
            .await;
        assert_eq!((unknown.overall_code, unknown.statuses.len()), (OK, 2));
        assert!(unknown.statuses.iter().all(|s| s.current_limit.is_none()));

        // A limit override applies even where no rule matches.
        let mut o = request("rl", &[&[("no_rule_here", "v")]]);
        o.descriptors[0].limit = Some(RateLimitOverride {
            requests_per_unit: 1,
            unit: 4,
        });
        assert_eq!(s.ask(o.clone()).await.overall_code, OK);
        let o2 = s.ask(o).await;
        assert_eq!(o2.overall_code, OVER);
        assert_eq!(
            o2.statuses[0].current_limit.as_ref().unwrap().unit,
            4,
            "DAY"
        );

        // Empty domain or descriptors: INVALID_ARGUMENT.
        for bad in [request("", &[&[("a", "b")]]), request("rl", &[])] {
            let e = s.ask_status(bad).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        }
        s.running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaces_and_wildcards() {
    let yaml = "
domain: d
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1, name: per-user }
  - key: vip
    rate_limit: { unit: minute, requests_per_unit: 100, name: vip, replaces: [{name: per-user}] }
  - key: path
    value: /files/*
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
";
    for backing in backings() {
        let s = Server::start("replaces", &[("d.yaml", yaml)], backing).await;
        // With vip in the same request, per-user is dropped: never over, never counted.
        for _ in 0..3 {
            let r = s
                .ask(request("d", &[&[("user", "u")], &[("vip", "v")]]))
                .await;
            assert_eq!(r.overall_code, OK);
            assert!(r.statuses[0].current_limit.is_none());
        }
        assert_eq!(
            s.should("d", &[("user", "u")]).await.overall_code,
            OK,
            "replaced hits were not counted"
        );

        // Wildcards: each value its own counter; share_threshold: one for all.
        assert_eq!(
            s.should("d", &[("path", "/files/a")]).await.overall_code,
            OK
        );
        assert_eq!(
            s.should("d", &[("path", "/files/b")]).await.overall_code,
            OK
        );
        assert_eq!(
            s.should("d", &[("path", "/shared/a")]).await.overall_code,
            OK
        );
        assert_eq!(
            s.should("d", &[("path", "/shared/b")]).await.overall_code,
            OVER
        );
        s.running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_and_reference_headers() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    let s = Server::start_with(
        "global-shadow",
        &[("d.yaml", yaml)],
        Backing::Memory,
        |st| {
            st.service.shadow_mode = true;
            st.headers.reference = Some([
                "RateLimit-Limit".into(),
                "RateLimit-Remaining".into(),
                "RateLimit-Reset".into(),
            ]);
        },
    )
    .await;
    s.should("d", &[("k", "v")]).await;
    let r = s.should("d", &[("k", "v")]).await;
    assert_eq!(
        r.overall_code, OK,
        "global shadow mode never answers over the limit"
    );
    assert_eq!(r.statuses[0].code, OVER, "the status still says so");
    let headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let reset = (60 - T0 % 60).to_string();
    assert_eq!(
        headers,
        [
            ("RateLimit-Limit".into(), "1".into()),
            ("RateLimit-Remaining".into(), "0".into()),
            ("RateLimit-Reset".into(), reset)
        ]
    );
    let _ = descriptor(&[]);
    s.running.stop().await;
}
