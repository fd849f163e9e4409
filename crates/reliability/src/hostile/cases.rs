//! The malformed requests, class by class, on every API.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;
use serde_json::json;

use super::{Api, Case};

/// The classes, on every API. Domain `reliability`, descriptor key `user` (the rule of
/// [`Policy::yaml`](crate::Policy::yaml)).
pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // Requests that must be decided however odd, added after the refused ones.
    let mut decided_too = Vec::new();
    let mut check = |class: &str, body: serde_json::Value| {
        cases.push(refused(class, Api::Check, body.to_string().as_bytes()))
    };
    let one = |value: &str| json!([{ "entries": [{ "key": "user", "value": value }] }]);
    let many = |n: usize| -> Vec<_> { (0..n).map(|i| one(&i.to_string())[0].clone()).collect() };
    let domain = "reliability";
    // The same valid request on /v1/check and /json.
    let valid_json = json!({ "domain": domain, "descriptors": one("control") })
        .to_string()
        .into_bytes();
    check(
        "empty domain",
        json!({ "domain": "", "descriptors": one("a") }),
    );
    check(
        "domain of 300 bytes",
        json!({ "domain": "d".repeat(300), "descriptors": one("a") }),
    );
    check(
        "no descriptors",
        json!({ "domain": domain, "descriptors": [] }),
    );
    check(
        "65 descriptors (limit 64)",
        json!({ "domain": domain, "descriptors": many(65) }),
    );
    check(
        "10,000 descriptors",
        json!({ "domain": domain, "descriptors": many(10_000) }),
    );
    let entries: Vec<_> = (0..33).map(|i| json!({ "key": format!("k{i}") })).collect();
    check(
        "33 entries in a descriptor (limit 32)",
        json!({ "domain": domain, "descriptors": [{ "entries": entries }] }),
    );
    check(
        "empty key",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "" }] }] }),
    );
    // Decided, not refused: Envoy under `failure_mode_deny: false` admits a refused call.
    decided_too.push(decided(
        "value of 2,000 bytes (decided: a digest in its key)",
        Api::Check,
        json!({ "domain": domain, "descriptors": one(&"v".repeat(2000)) })
            .to_string()
            .as_bytes(),
    ));
    check(
        "value of 1 MiB (body over 64 KiB)",
        json!({ "domain": domain, "descriptors": one(&"v".repeat(1 << 20)) }),
    );
    check(
        "cost 2^53 + 1",
        json!({ "domain": domain, "descriptors": one("a"), "cost": 9_007_199_254_740_993_u64 }),
    );
    check(
        "cost 2^64 - 1",
        json!({ "domain": domain, "descriptors": one("a"), "cost": u64::MAX }),
    );
    check(
        "descriptor cost 2^64 - 1",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "cost": u64::MAX }] }),
    );
    check(
        "override unit `fortnight`",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "limit": { "requests_per_unit": 1, "unit": "fortnight" } }] }),
    );
    check(
        "unknown field",
        json!({ "domain": domain, "descriptors": one("a"), "surprise": 1 }),
    );
    check(
        "domain of the wrong type",
        json!({ "domain": 5, "descriptors": one("a") }),
    );
    // Deep nesting where a value is expected: a recursive parser must stop, not overflow.
    let deep = [
        &br#"{"domain":"reliability","descriptors":"#[..],
        &[b'['; 30_000],
        &[b']'; 30_000],
        b"}",
    ]
    .concat();
    let prefix = br#"{"domain":"reliability","descriptors":[{"entries":[{"key":"user","value":"a"}]}],"cost":"#;
    for (class, cost) in [
        ("cost -1", "-1"),
        ("cost NaN", "NaN"),
        ("cost 1e300", "1e300"),
        ("cost 1.5", "1.5"),
    ] {
        cases.push(refused(
            class,
            Api::Check,
            &[&prefix[..], cost.as_bytes(), b"}"].concat(),
        ));
    }
    cases.push(refused("not JSON", Api::Check, b"not json"));
    cases.push(refused("empty body", Api::Check, b""));
    cases.push(refused("non-UTF-8 bytes in a value", Api::Check, b"{\"domain\":\"reliability\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"\xff\xfe\"}]}]}"));
    cases.push(refused(
        "lone UTF-16 surrogate in a key",
        Api::Check,
        br#"{"domain":"reliability","descriptors":[{"entries":[{"key":"\udc00"}]}]}"#,
    ));
    cases.push(refused("JSON nested 30,000 deep", Api::Check, &deep));
    cases.push(control(Api::Check, valid_json.clone()));

    let mut json_api = |class: &str, body: serde_json::Value| {
        cases.push(refused(class, Api::Json, body.to_string().as_bytes()))
    };
    json_api("domain of the wrong type", json!({ "domain": 5 }));
    json_api(
        "hitsAddend -1",
        json!({ "domain": domain, "descriptors": one("a"), "hitsAddend": -1 }),
    );
    json_api(
        "hitsAddend 2^40 (over 32 bits)",
        json!({ "domain": domain, "descriptors": one("a"), "hitsAddend": 1_u64 << 40 }),
    );
    json_api(
        "unit 99",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "limit": { "requestsPerUnit": 1, "unit": 99 } }] }),
    );
    json_api(
        "unknown field",
        json!({ "domain": domain, "descriptors": one("a"), "surprise": 1 }),
    );
    json_api(
        "65 descriptors",
        json!({ "domain": domain, "descriptors": many(65) }),
    );
    cases.push(refused("not JSON", Api::Json, b"\xff\xfe not json"));
    cases.push(refused("JSON nested 30,000 deep", Api::Json, &deep));
    cases.push(control(Api::Json, valid_json));

    let request = |descriptors: Vec<RateLimitDescriptor>| RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    };
    let descriptor = |value: &str| RateLimitDescriptor {
        entries: vec![Entry {
            key: "user".into(),
            value: value.into(),
        }],
        ..Default::default()
    };
    let mut grpc = |class: &str, r: RateLimitRequest| {
        cases.push(refused(class, Api::Grpc, &r.encode_to_vec()))
    };
    grpc(
        "empty domain",
        RateLimitRequest {
            domain: String::new(),
            ..request(vec![descriptor("a")])
        },
    );
    grpc(
        "domain of 300 bytes",
        RateLimitRequest {
            domain: "d".repeat(300),
            ..request(vec![descriptor("a")])
        },
    );
    grpc("no descriptors", request(vec![]));
    grpc(
        "65 descriptors (limit 64)",
        request((0..65).map(|i| descriptor(&i.to_string())).collect()),
    );
    grpc(
        "10,000 descriptors",
        request((0..10_000).map(|i| descriptor(&i.to_string())).collect()),
    );
    grpc(
        "value of 2 MiB (message over 1 MiB)",
        request(vec![descriptor(&"v".repeat(2 << 20))]),
    );
    grpc(
        "empty key",
        request(vec![RateLimitDescriptor {
            entries: vec![Entry::default()],
            ..Default::default()
        }]),
    );
    decided_too.push(decided(
        "value of 2,000 bytes (decided: a digest in its key)",
        Api::Grpc,
        &request(vec![descriptor(&"v".repeat(2000))]).encode_to_vec(),
    ));
    decided_too.push(decided(
        "value of 60 KiB, Envoy's header bound (decided)",
        Api::Grpc,
        &request(vec![descriptor(&"v".repeat(60 << 10))]).encode_to_vec(),
    ));
    grpc(
        "override unit 99",
        request(vec![RateLimitDescriptor {
            limit: Some(RateLimitOverride {
                requests_per_unit: 1,
                unit: 99,
            }),
            ..descriptor("a")
        }]),
    );
    // Field 1 (domain), length 2, bytes that are not UTF-8.
    cases.push(refused(
        "non-UTF-8 domain",
        Api::Grpc,
        &[0x0a, 0x02, 0xff, 0xfe],
    ));
    cases.push(refused(
        "malformed protobuf",
        Api::Grpc,
        &[0xff, 0xff, 0xff, 0xff, 0x0f, 0x12],
    ));
    cases.push(refused("truncated varint", Api::Grpc, &[0x18, 0xff]));
    cases.push(refused(
        "length past the end",
        Api::Grpc,
        &[0x0a, 0x7f, b'a'],
    ));
    cases.push(control(Api::Grpc, grpc_request("control")));
    cases.extend(decided_too);
    cases
}

/// A valid `ShouldRateLimit` for `user=value` in the suite's domain, encoded: the
/// gRPC control, and what the good callers of the other tables send.
pub(super) fn grpc_request(value: &str) -> Vec<u8> {
    RateLimitRequest {
        domain: "reliability".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: value.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
    .encode_to_vec()
}

/// A request that must be refused without reaching the store.
pub(super) fn refused(class: &str, api: Api, body: &[u8]) -> Case {
    Case {
        class: class.into(),
        api,
        body: body.to_vec(),
        headers: Vec::new(),
        valid: false,
    }
}

/// The valid request that must reach the store: proof the store calls are counted.
pub(super) fn control(api: Api, body: Vec<u8>) -> Case {
    decided("control: a valid request", api, &body)
}

/// A request that must be decided (reach the store), however odd it looks.
pub(super) fn decided(class: &str, api: Api, body: &[u8]) -> Case {
    Case {
        class: class.into(),
        api,
        body: body.to_vec(),
        headers: Vec::new(),
        valid: true,
    }
}
