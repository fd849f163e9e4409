//! Hostile input at the doors of holds and quotas (#60): `/v1/acquire`, `/v1/release`,
//! `/v1/renew` and the admin's `/v1/rlqs/explain`. Bad domains, floods of ids, ids of
//! any length (decided, not refused: a refused call is one Envoy under
//! `failure_mode_deny: false` admits), huge bucket ids.

use serde_json::json;

use super::cases::{decided, refused};
use super::{Api, Case};

/// A `concurrency` rule for these cases: at most 3 holds of a tenant.
pub(super) const HOLDS_POLICY: &str = "\
domain: holds
descriptors:
  - key: tenant
    descriptors:
      - key: request_id
        limits:
          - { name: in-flight, algorithm: concurrency, limit: 3, window: 30s }
";

/// The cases, refused before any store call unless they say they are decided.
pub fn holds_cases() -> Vec<Case> {
    let hold = |tenant: &str, id: &str| {
        json!({ "domain": "holds", "descriptors": [{ "entries": [
            { "key": "tenant", "value": tenant }, { "key": "request_id", "value": id },
        ] }] })
    };
    let body = |v: serde_json::Value| v.to_string().into_bytes();
    let flood: Vec<_> = (0..10_000)
        .map(|i| hold("acme", &format!("r{i}"))["descriptors"][0].clone())
        .collect();
    let mut cases = Vec::new();
    for (api, what) in [
        (Api::Acquire, "acquire"),
        (Api::Release, "release"),
        (Api::Renew, "renew"),
    ] {
        let mut push =
            |class: &str, b: Vec<u8>| cases.push(refused(&format!("{what}: {class}"), api, &b));
        push(
            "empty domain",
            body(json!({ "domain": "", "descriptors": hold("a", "r")["descriptors"] })),
        );
        push(
            "10,000 ids in one request (limit 64)",
            body(json!({ "domain": "holds", "descriptors": flood })),
        );
        push(
            "an id of 1 MiB (body over 64 KiB)",
            body(hold("acme", &"r".repeat(1 << 20))),
        );
        push(
            "a key of 2,000 bytes (limit 256)",
            body(
                json!({ "domain": "holds", "descriptors": [{ "entries": [{ "key": "k".repeat(2000), "value": "v" }] }] }),
            ),
        );
        push(
            "unknown field",
            body(
                json!({ "domain": "holds", "descriptors": hold("a", "r")["descriptors"], "surprise": 1 }),
            ),
        );
        push("not JSON", b"{\"domain\":".to_vec());
        push(
            "cost 2^64 - 1",
            body(
                json!({ "domain": "holds", "descriptors": hold("a", "r")["descriptors"], "cost": u64::MAX }),
            ),
        );
        cases.push(decided(
            &format!("{what}: an id of 2,000 bytes (decided: a digest)"),
            api,
            &body(hold("acme", &"r".repeat(2000))),
        ));
    }
    let mut explain = |class: &str, b: Vec<u8>| {
        cases.push(refused(
            &format!("RLQS explain: {class}"),
            Api::Admin("POST", "/v1/rlqs/explain"),
            &b,
        ));
    };
    explain("not JSON", b"{\"domain\"".to_vec());
    explain(
        "empty domain",
        body(json!({ "domain": "", "bucket": { "tenant": "acme" } })),
    );
    explain(
        "a bucket of 10,000 entries",
        body(
            json!({ "domain": "api", "bucket": (0..10_000).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>() }),
        ),
    );
    explain(
        "a bucket value of 1 MiB (body over 64 KiB)",
        body(json!({ "domain": "api", "bucket": { "tenant": "v".repeat(1 << 20) } })),
    );
    explain(
        "a bucket that is a list",
        body(json!({ "domain": "api", "bucket": ["tenant"] })),
    );
    cases
}
