//! More hostile requests (issue #37): what a caller may not ask at the trust boundary
//! (its own limit, more store work than a request may take, a browser's cross-site
//! post), JSON and protobuf of every wrong shape, and the admin listener asked under
//! another name, by another site, or for what does not exist.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message;
use serde_json::json;

use super::cases::{decided, refused};
use super::{Api, Case};

/// A second policy file beside the suite's: a rule as heavy as a rule gets.
pub(super) const HEAVY_POLICY: &str = "\
domain: heavy
descriptors:
  - key: k
    limits: [{ algorithm: sliding_window, precision: 10000, limit: 100, window: 1h }]
";

/// The cases, each refused before any store call.
pub fn boundary_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let domain = "reliability";
    let one = |value: &str| json!([{ "entries": [{ "key": "user", "value": value }] }]);
    let with = |class: &str, api: Api, body: &[u8], headers: &[(&'static str, &str)]| Case {
        headers: headers.iter().map(|(n, v)| (*n, (*v).to_owned())).collect(),
        ..refused(class, api, body)
    };
    let heavy: Vec<_> = (0..64)
        .map(|i| json!({ "entries": [{ "key": "k", "value": format!("h{i}") }] }))
        .collect();

    // === the trust boundary ===
    let mut check = |class: &str, body: serde_json::Value| {
        cases.push(refused(class, Api::Check, body.to_string().as_bytes()));
    };
    check(
        "own limit of 2^32 - 1 a second (http_limit_overrides: refuse)",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "limit": { "requests_per_unit": u32::MAX, "unit": "second" } }] }),
    );
    check(
        "own limit of 1 a year: a counter for a year",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "invented" }], "limit": { "requests_per_unit": 1, "unit": "year" } }] }),
    );
    check(
        "64 descriptors of precision 10,000 (10,048 units of store work)",
        json!({ "domain": "heavy", "descriptors": heavy }),
    );
    // === JSON of the wrong shape ===
    check(
        "descriptors an object",
        json!({ "domain": domain, "descriptors": { "entries": [] } }),
    );
    check(
        "entries a string",
        json!({ "domain": domain, "descriptors": [{ "entries": "user=a" }] }),
    );
    check(
        "a value a number",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": 5 }] }] }),
    );
    check(
        "domain null",
        json!({ "domain": null, "descriptors": one("a") }),
    );
    check("the body an array", json!([domain]));
    check("the body a string", json!("reliability"));
    check(
        "no entries",
        json!({ "domain": domain, "descriptors": [{ "entries": [] }] }),
    );
    check(
        "key of 2,000 bytes (limit 256)",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "k".repeat(2000), "value": "a" }] }] }),
    );
    check(
        "cost a string",
        json!({ "domain": domain, "descriptors": one("a"), "cost": "1" }),
    );
    check(
        "own limit -1",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "limit": { "requests_per_unit": -1, "unit": "second" } }] }),
    );
    let valid = json!({ "domain": domain, "descriptors": one("a") }).to_string();
    for (class, body) in [
        (
            "domain twice",
            br#"{"domain":"reliability","domain":"x","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#.to_vec(),
        ),
        (
            "a byte-order mark first",
            [&b"\xef\xbb\xbf"[..], valid.as_bytes()].concat(),
        ),
        (
            "garbage after the JSON",
            [valid.as_bytes(), &b"xyz"[..]].concat(),
        ),
        (
            "cost 1e400",
            br#"{"domain":"reliability","descriptors":[{"entries":[{"key":"user","value":"a"}]}],"cost":1e400}"#.to_vec(),
        ),
    ] {
        cases.push(refused(class, Api::Check, &body));
    }

    // === /json ===
    let mut json_api = |class: &str, body: serde_json::Value| {
        cases.push(refused(class, Api::Json, body.to_string().as_bytes()));
    };
    json_api(
        "own limit of 2^32 - 1 a second (http_limit_overrides: refuse)",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "limit": { "requestsPerUnit": u32::MAX, "unit": "SECOND" } }] }),
    );
    json_api(
        "64 descriptors of precision 10,000",
        json!({ "domain": "heavy", "descriptors": heavy }),
    );
    json_api(
        "descriptors not an array",
        json!({ "domain": domain, "descriptors": 5 }),
    );
    json_api(
        "entries missing",
        json!({ "domain": domain, "descriptors": [{}] }),
    );
    json_api(
        "hitsAddend a word",
        json!({ "domain": domain, "descriptors": one("a"), "hitsAddend": "five" }),
    );
    json_api(
        "hitsAddend 1.5",
        json!({ "domain": domain, "descriptors": one("a"), "hitsAddend": 1.5 }),
    );
    json_api(
        "unit `FORTNIGHT`",
        json!({ "domain": domain, "descriptors": [{ "entries": [{ "key": "user", "value": "a" }], "limit": { "requestsPerUnit": 1, "unit": "FORTNIGHT" } }] }),
    );
    json_api(
        "empty domain",
        json!({ "domain": "", "descriptors": one("a") }),
    );
    json_api(
        "no descriptors",
        json!({ "domain": domain, "descriptors": [] }),
    );
    cases.push(decided(
        "value of 2,000 bytes (decided: a digest in its key)",
        Api::Json,
        json!({ "domain": domain, "descriptors": one(&"v".repeat(2000)) })
            .to_string()
            .as_bytes(),
    ));
    cases.push(refused("empty body", Api::Json, b""));
    cases.push(refused("a bare number", Api::Json, b"42"));

    // === a browser's cross-site post ===
    for (api, origin) in [
        (Api::Check, "https://evil.example"),
        (Api::Json, "null"),
        (Api::Check, "file://"),
    ] {
        cases.push(with(
            &format!("a text/plain post from `Origin: {origin}`"),
            api,
            valid.as_bytes(),
            &[("content-type", "text/plain"), ("origin", origin)],
        ));
    }

    // === gRPC ===
    let request = |descriptors: Vec<RateLimitDescriptor>| RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    };
    let descriptor = |key: &str, value: &str| RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..Default::default()
    };
    let mut grpc = |class: &str, r: RateLimitRequest| {
        cases.push(refused(class, Api::Grpc, &r.encode_to_vec()));
    };
    grpc(
        "64 descriptors of precision 10,000",
        RateLimitRequest {
            domain: "heavy".into(),
            ..request((0..64).map(|i| descriptor("k", &format!("h{i}"))).collect())
        },
    );
    for (class, hits) in [
        ("descriptor hits_addend 2^53 + 1", (1u64 << 53) + 1),
        ("descriptor hits_addend 2^64 - 1", u64::MAX),
    ] {
        grpc(
            class,
            request(vec![RateLimitDescriptor {
                hits_addend: Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits }),
                ..descriptor("user", "a")
            }]),
        );
    }
    grpc(
        "an entry with a value and no key",
        request(vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: String::new(),
                value: "a".into(),
            }],
            ..Default::default()
        }]),
    );
    grpc(
        "33 entries in a descriptor",
        request(vec![RateLimitDescriptor {
            entries: (0..33)
                .map(|i| Entry {
                    key: format!("k{i}"),
                    value: "v".into(),
                })
                .collect(),
            ..Default::default()
        }]),
    );
    grpc(
        "a descriptor with no entries",
        request(vec![RateLimitDescriptor::default()]),
    );
    grpc("an empty message", RateLimitRequest::default());
    for (class, bytes) in [
        // Field 2 (descriptors) sent as a varint.
        ("descriptors as a varint", vec![0x10, 0x01]),
        // Field 3 (hits_addend): eleven bytes of varint, one past the longest.
        (
            "an 11-byte varint",
            [&[0x18][..], &[0xff; 10], &[0x01]].concat(),
        ),
        // Field 1 as a start-group (wire type 3), long deprecated.
        ("a start-group", vec![0x0b, 0x0c]),
        // A descriptor whose length runs past the message.
        ("a descriptor past the end", vec![0x12, 0x40, 0x0a, 0x01]),
    ] {
        cases.push(refused(class, Api::Grpc, &bytes));
    }

    // === the admin listener ===
    let evil_host = [("host", "rebind.attacker.example")];
    for path in ["/v1/config", "/v1/top", "/v1/history", "/rlconfig"] {
        cases.push(with(
            "DNS rebinding: `Host: rebind.attacker.example`",
            Api::Admin("GET", path),
            b"",
            &evil_host,
        ));
    }
    let explain = valid.as_bytes();
    cases.push(with(
        "a post from `Origin: https://evil.example`",
        Api::Admin("POST", "/v1/explain"),
        explain,
        &[
            ("content-type", "text/plain"),
            ("origin", "https://evil.example"),
        ],
    ));
    cases.push(with(
        "DNS rebinding on a post",
        Api::Admin("POST", "/v1/explain"),
        explain,
        &evil_host,
    ));
    for (class, method, path, body) in [
        ("no such page", "GET", "/nothing-here", &b""[..]),
        (
            "a path that climbs",
            "GET",
            "/ui/../../etc/passwd",
            &b""[..],
        ),
        ("not JSON", "POST", "/v1/explain", &b"not json"[..]),
        (
            "empty domain",
            "POST",
            "/v1/explain",
            &br#"{"domain":"","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#[..],
        ),
        (
            "a method it does not take",
            "DELETE",
            "/v1/config",
            &b""[..],
        ),
        (
            "a query that is not a number",
            "GET",
            "/v1/top?limit=abc",
            &b""[..],
        ),
    ] {
        cases.push(with(class, Api::Admin(method, path), body, &[]));
    }
    let big = [
        &br#"{"domain":"reliability","descriptors":[{"entries":[{"key":"user","value":""#[..],
        &vec![b'v'; 1 << 20],
        &br#""}]}]}"#[..],
    ]
    .concat();
    cases.push(with(
        "a body of 1 MiB",
        Api::Admin("POST", "/v1/explain"),
        &big,
        &[],
    ));
    cases
}
