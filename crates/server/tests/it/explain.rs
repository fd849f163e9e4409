//! `POST /v1/explain`: what a check would do and why, consuming nothing, on memory and
//! Redis, over a real socket.

use crate::support;

use serde_json::{Value, json};
use support::{Server, backings};

const POLICY: &str = "
domain: api
descriptors:
  - key: user
    limits:
      - { name: per-user, algorithm: fixed_window, limit: 3, window: 1h }
  - key: team
    mode: shadow
    limits:
      - { name: trial, algorithm: gcra, limit: 1, window: 1h }
  - key: path
    value: /admin*
    rate_limit: { name: admin, unit: minute, requests_per_unit: 60 }
  - key: plan
    value: free
    rate_limit: { name: free, unit: hour, requests_per_unit: 10 }
    descriptors:
      - key: tier
        rate_limit: { name: tiered, unit: hour, requests_per_unit: 100, replaces: [{ name: free }] }
";

fn body(entries: &[(&str, &str)]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(k, v)| json!({ "key": k, "value": v }))
        .collect();
    json!({ "domain": "api", "descriptors": [{ "entries": entries }] })
}

fn limit<'a>(explained: &'a Value, rule: &str) -> &'a Value {
    explained["descriptors"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["limits"].as_array().unwrap())
        .find(|l| l["rule"] == rule)
        .unwrap_or_else(|| panic!("no limit `{rule}` in {explained}"))
}

/// Two explains read the same counter; the check after them consumes exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explaining_consumes_nothing_and_names_the_limit_that_would_deny() {
    for backing in backings() {
        let s = Server::start("explain", &[("api.yaml", POLICY)], backing.clone()).await;
        // A user's limit, and a team's in shadow mode.
        let user = json!({ "domain": "api", "descriptors": [
            { "entries": [{ "key": "user", "value": "u1" }] },
            { "entries": [{ "key": "team", "value": "t1" }] },
        ] });
        let (status, _, _) = s.check(user.clone()).await;
        assert_eq!(status, 200);

        let (status, first) = s.post("/v1/explain", &user).await;
        assert_eq!(status, 200, "{first}");
        let (_, second) = s.post("/v1/explain", &user).await;
        let per_user = limit(&first, "per-user");
        assert_eq!(per_user["state"]["remaining"], 2, "{backing:?}: {first}");
        assert_eq!(
            limit(&second, "per-user")["state"]["remaining"],
            2,
            "{backing:?}: the first explain consumed nothing"
        );
        assert_eq!(per_user["algorithm"], "fixed_window");
        assert_eq!(per_user["mode"], "enforce");
        assert_eq!(per_user["would_admit"], true);
        assert!(
            per_user["key"].as_str().unwrap().contains("user=u1"),
            "{per_user}"
        );
        assert_eq!(
            first["allowed"], true,
            "the shadow rule denies nothing: {first}"
        );
        let trial = limit(&first, "trial");
        assert_eq!(
            (&trial["mode"], &trial["would_admit"]),
            (&json!("shadow"), &json!(false))
        );
        assert_eq!(
            first["descriptors"][0]["path"],
            json!([{ "entry": 0, "node": "user", "matched_by": "any value" }])
        );

        let (_, _, checked) = s.check(user.clone()).await;
        assert_eq!(
            checked["descriptors"][0]["remaining"], 1,
            "{backing:?}: {checked}"
        );
        let (_, _, _) = s.check(user.clone()).await;
        let (_, limited) = s.post("/v1/explain", &user).await;
        assert_eq!(limited["allowed"], false, "{backing:?}: {limited}");
        assert_eq!(
            limited["denied_by"],
            json!({ "descriptor": 0, "rule": "per-user" })
        );
        let per_user = limit(&limited, "per-user");
        assert_eq!(
            (&per_user["state"]["remaining"], &per_user["would_admit"]),
            (&json!(0), &json!(false))
        );
        assert!(per_user["state"]["reset_after_ms"].as_u64().unwrap() > 0);
        // A look with cost 0 would pass.
        let mut peek = user.clone();
        peek["cost"] = json!(0);
        let (_, peeked) = s.post("/v1/explain", &peek).await;
        assert_eq!(peeked["allowed"], true, "{peeked}");
    }
}

/// A descriptor that matches nothing says why and what exists there; a wildcard says
/// so; a replaced rule names what replaced it; a bad body is a 400 naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_wildcard_replaced_and_bad_input() {
    let s = Server::start(
        "explain-paths",
        &[("api.yaml", POLICY)],
        backings()[0].clone(),
    )
    .await;
    let (_, nothing) = s.post("/v1/explain", &body(&[("usr", "u1")])).await;
    let d = &nothing["descriptors"][0];
    assert_eq!(d["matched"], false);
    let why = d["unmatched"].as_str().unwrap();
    assert!(
        why.contains("entry 0 matches no node") && why.contains("user"),
        "{why}"
    );
    assert_eq!(nothing["allowed"], true);

    let (_, deeper) = s
        .post("/v1/explain", &body(&[("user", "u1"), ("x", "y")]))
        .await;
    let why = deeper["descriptors"][0]["unmatched"].as_str().unwrap();
    assert!(why.contains("the tree ends at entry 0"), "{why}");

    let (_, admin) = s
        .post("/v1/explain", &body(&[("path", "/admin/users")]))
        .await;
    assert_eq!(
        admin["descriptors"][0]["path"][0],
        json!({ "entry": 0, "node": "path_/admin*", "matched_by": "wildcard" })
    );

    // `tiered` replaces `free`: both are matched by two descriptors of one request.
    let two = json!({ "domain": "api", "descriptors": [
        { "entries": [{ "key": "plan", "value": "free" }] },
        { "entries": [{ "key": "plan", "value": "free" }, { "key": "tier", "value": "gold" }] },
    ] });
    let (status, replaced) = s.post("/v1/explain", &two).await;
    assert_eq!(status, 200, "{replaced}");
    let free = &replaced["descriptors"][0]["limits"][0];
    assert_eq!(free["replaced_by"], "tiered", "{replaced}");

    let (_, unknown) = s.post("/v1/explain", &json!({ "domain": "nope", "descriptors": [{ "entries": [{ "key": "a", "value": "b" }] }] })).await;
    assert_eq!(unknown["domain_found"], false);
    assert!(
        unknown["descriptors"][0]["unmatched"]
            .as_str()
            .unwrap()
            .contains("domain `nope`")
    );

    for bad in [
        json!({ "domain": "api" }),
        json!({ "domain": "api", "descriptors": [], "cost": -1 }),
    ] {
        let (status, answer) = s.post("/v1/explain", &bad).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(answer["error"]["message"].as_str().is_some(), "{answer}");
    }
}

/// A calendar period's reset is its end, said the same by `/v1/check`'s body, its
/// `RateLimit` header and `/v1/explain`: a month in Europe/Berlin, asked at the test
/// clock's 2023-11-14T22:13:20Z (23:13:20 in Berlin), ends at Berlin's midnight on
/// December 1st, 2023-11-30T23:00:00Z: 16 days, 46 minutes and 40 seconds later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periods_reset_is_its_end_in_the_answer_its_headers_and_explain() {
    const UNTIL_DECEMBER: u64 = 16 * 86_400 + 46 * 60 + 40;
    let policy = "
domain: api
descriptors:
  - key: tenant
    limits:
      - { name: month, algorithm: fixed_window, limit: 5, period: month, time_zone: Europe/Berlin }
";
    for backing in backings() {
        let s = Server::start("explain-period", &[("api.yaml", policy)], backing.clone()).await;
        let tenant = body(&[("tenant", "t1")]);
        let (status, headers, checked) = s.check(tenant.clone()).await;
        assert_eq!(status, 200, "{backing:?}: {checked}");
        assert_eq!(
            checked["descriptors"][0]["reset_after_ms"],
            UNTIL_DECEMBER * 1000,
            "{backing:?}: {checked}"
        );
        let ratelimit = headers["ratelimit"].to_str().unwrap();
        assert!(
            ratelimit.ends_with(&format!(";t={UNTIL_DECEMBER}")),
            "{backing:?}: {ratelimit}"
        );
        let (_, explained) = s.post("/v1/explain", &tenant).await;
        let month = limit(&explained, "month");
        assert_eq!(
            month["state"]["reset_after_ms"],
            UNTIL_DECEMBER * 1000,
            "{backing:?}: {explained}"
        );
        assert_eq!(month["state"]["remaining"], 4, "{backing:?}: {explained}");
    }
}
