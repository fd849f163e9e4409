//! Reservations asked wrong: `/v1/reserve` and `/v1/commit` refuse what a reservation
//! cannot be, before any decision, naming the field. Two of these were found by
//! schemathesis against the OpenAPI document (`ttl_ms: null` taken as absent, and the
//! 404's kind missing from the document); the rest hold the same refusals around them.

use serde_json::json;

use super::cases::{control, refused};
use super::{Api, Case};

/// A third policy file beside the suite's: a rule that can give units back, so a
/// reservation on it is valid (the control).
pub(super) const METERED_POLICY: &str = "\
domain: metered
descriptors:
  - key: tenant
    limits: [{ algorithm: token_bucket, limit: 1000, window: 1m }]
";

/// The cases: refused with a 4xx and a JSON body saying why, with no script call; and a
/// valid reservation, which must reach the store.
pub fn reserve_cases() -> Vec<Case> {
    let tenant = json!([{ "entries": [{ "key": "tenant", "value": "t" }] }]);
    let reserve = |extra: serde_json::Value| {
        let mut body = json!({ "domain": "metered", "cost": 50, "descriptors": tenant });
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body.to_string().into_bytes()
    };
    let mut cases = Vec::new();
    for (class, extra) in [
        (
            "ttl_ms null (found by schemathesis)",
            json!({ "ttl_ms": null }),
        ),
        ("ttl_ms 0", json!({ "ttl_ms": 0 })),
        ("ttl_ms over a day", json!({ "ttl_ms": 86_400_001 })),
        ("ttl_ms a string", json!({ "ttl_ms": "1000" })),
        ("estimate (cost) 0", json!({ "cost": 0 })),
        (
            "usage: true (usage is not an estimate)",
            json!({ "usage": true }),
        ),
    ] {
        cases.push(refused(class, Api::Reserve, &reserve(extra)));
    }
    cases.push(refused(
        "on a sliding_log rule (cannot give units back)",
        Api::Reserve,
        json!({ "domain": "reliability", "cost": 5,
                "descriptors": [{ "entries": [{ "key": "user", "value": "a" }] }] })
        .to_string()
        .as_bytes(),
    ));
    cases.push(refused(
        "ttl_ms on /v1/check",
        Api::Check,
        &reserve(json!({ "ttl_ms": 1000 })),
    ));
    cases.push(control(Api::Reserve, reserve(json!({}))));

    let id = "r0123456789abcdef0123456789abcdef";
    for (class, body) in [
        (
            "an id never made (404 `no_reservation`, found by schemathesis)",
            json!({ "reservation": id, "used": 1 }),
        ),
        (
            "an id that is a path",
            json!({ "reservation": "../../etc/passwd", "used": 1 }),
        ),
        ("used -1", json!({ "reservation": id, "used": -1 })),
        ("no used", json!({ "reservation": id })),
        (
            "reservation a number",
            json!({ "reservation": 5, "used": 1 }),
        ),
        (
            "unknown field",
            json!({ "reservation": id, "used": 1, "refund": true }),
        ),
    ] {
        cases.push(refused(class, Api::Commit, body.to_string().as_bytes()));
    }
    cases.push(refused(
        "used 2^64",
        Api::Commit,
        format!(r#"{{"reservation":"{id}","used":18446744073709551616}}"#).as_bytes(),
    ));
    cases
}
