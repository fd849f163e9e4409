//! What a caller may ask beyond its descriptors, per listener (issue #37, point 3): a
//! limit of its own in place of a rule's, and a cost. gRPC takes Envoy's overrides as the
//! reference does; the HTTP listener refuses them unless told otherwise; either may
//! drop them or refuse them, and cap the hits of one descriptor.

use crate::support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use serde_json::json;
use spillway_server::config::{Callers, Overrides};
use support::{Backing, Server, descriptor, request};

const POLICY: &str = "\
domain: callers
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1 }
";

/// A gRPC request for `user` overriding the rule with 2^32 - 1 a second.
fn lifted(user: &str) -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    let mut req = request("callers", &[]);
    req.descriptors.push(RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: u32::MAX,
            unit: 1, // SECOND
        }),
        ..descriptor(&[("user", user)])
    });
    req
}

/// `/v1/check` for `user` overriding the rule with 2^32 - 1 a second.
fn lifted_json(user: &str) -> serde_json::Value {
    json!({ "domain": "callers", "descriptors": [{
        "entries": [{ "key": "user", "value": user }],
        "limit": { "requests_per_unit": u32::MAX, "unit": "second" } }] })
}

async fn server(name: &str, grpc: Callers, http: Callers) -> Server {
    Server::start_with(name, &[("p.yaml", POLICY)], Backing::Memory, move |c| {
        c.service.grpc_callers = grpc;
        c.service.http_callers = http;
    })
    .await
}

#[tokio::test]
async fn by_default_grpc_takes_envoys_overrides_and_http_refuses_them() {
    let s = Server::start("callers-default", &[("p.yaml", POLICY)], Backing::Memory).await;
    // gRPC: the reference's behaviour, the override decides (three in a minute pass a
    // rule of one a minute).
    for _ in 0..3 {
        let r = s.ask(lifted("a")).await;
        assert_eq!(r.overall_code, 1, "{r:?}");
        assert_eq!(
            r.statuses[0]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            u32::MAX
        );
    }
    // HTTP: refused, saying why; /json too.
    let (status, _, body) = s.check(lifted_json("b")).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("takes no limit in the request"),
        "{message}"
    );
    let reference = json!({ "domain": "callers", "descriptors": [{
        "entries": [{ "key": "user", "value": "b" }],
        "limit": { "requestsPerUnit": 4_294_967_295_u32, "unit": "SECOND" } }] });
    let (status, _) = s.post("/json", &reference).await;
    assert_eq!(status, 400);
    // Nothing was counted for `b`: its first plain request passes, its second does not.
    let plain = json!({ "domain": "callers", "descriptors": [{ "entries": [{ "key": "user", "value": "b" }] }] });
    assert_eq!(s.check(plain.clone()).await.0, 200);
    assert_eq!(s.check(plain).await.0, 429);
}

#[tokio::test]
async fn a_listener_may_drop_or_refuse_overrides_and_cap_the_hits() {
    let refuse = Callers {
        overrides: Overrides::Refuse,
        max_hits: Some(10),
    };
    let ignore = Callers {
        overrides: Overrides::Ignore,
        max_hits: None,
    };
    let s = server("callers-set", refuse, ignore).await;

    // gRPC refuses the override of 2^32 a second: INVALID_ARGUMENT, nothing counted.
    let e = s.ask_status(lifted("a")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("limit_overrides"), "{}", e.message());
    assert_eq!(s.should("callers", &[("user", "a")]).await.overall_code, 1);

    // ... and a descriptor asking more than 10 hits.
    let mut heavy = request("callers", &[&[("user", "c")]]);
    heavy.hits_addend = 11;
    let e = s.ask_status(heavy.clone()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("max_hits, 10"), "{}", e.message());
    heavy.hits_addend = 10;
    assert_eq!(
        s.ask(heavy).await.overall_code,
        2,
        "10 hits: over 1 a minute"
    );

    // HTTP drops the override: the rule of one a minute decides.
    assert_eq!(s.check(lifted_json("b")).await.0, 200);
    assert_eq!(s.check(lifted_json("b")).await.0, 429);
}
