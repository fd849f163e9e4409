//! Overrides (#63): limits set as data by `PUT /v1/limits/{domain}` apply to exactly
//! their path, ahead of the policy file's; they are refused as strictly as a policy
//! file; kept (a journal on memory, Redis shared by replicas) and audited.

use std::sync::Arc;

use serde_json::{Value, json};
use spillway_core::{Clock, ManualClock, MemoryStore, SystemClock, Timestamp};
use spillway_server::{AnyStore, Config, Running};

use crate::support::{self, Server};

const POLICY: &str = "domain: o
descriptors:
  - key: api_key
    limits:
      - { name: per-minute, algorithm: gcra, limit: 5, window: 1m }
";

fn body(key: &str) -> Value {
    json!({ "domain": "o", "descriptors": [{ "entries": [{ "key": "api_key", "value": key }] }] })
}

/// How many of `n` checks of `key` are admitted (the manual clock stands still).
async fn admitted(s: &Server, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(s.check(body(key)).await.0 == 200);
    }
    ok
}

fn plan(limit: u64) -> Value {
    json!([{ "name": "plan", "algorithm": "fixed_window", "limit": limit, "window": "1m" }])
}

fn put_body(key: &str, limits: Value) -> Value {
    json!({ "entries": [{ "key": "api_key", "value": key }], "limits": limits })
}

/// An admin API call on the listener at `admin`: the status and the JSON body.
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut r = http.request(method, url);
    if let Some(b) = body {
        r = r.json(b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn put(s: &Server, key: &str, limits: Value) -> (u16, Value) {
    let url = s.url("/v1/limits/o");
    call(
        &s.http,
        reqwest::Method::PUT,
        url,
        Some(&put_body(key, limits)),
    )
    .await
}

fn admin(running: &Running, path: &str) -> String {
    format!(
        "http://{}{path}",
        running.admin_addr.expect("an admin listener")
    )
}

#[tokio::test]
async fn an_override_set_by_the_api_beats_the_files_rule_for_its_path_only() {
    for backing in support::backings() {
        let s = Server::start("overrides", &[("o.yaml", POLICY)], backing.clone()).await;
        let (status, change) = put(&s, "k1", plan(2)).await;
        assert_eq!(status, 200, "{backing:?}: {change}");
        assert_eq!(change["before"], Value::Null);
        assert_eq!(change["after"]["limits"], plan(2));
        assert_eq!(change["by"], "anonymous", "no admin token set");
        let first = change["version"].as_u64().unwrap();
        assert_eq!(
            admitted(&s, "k1", 4).await,
            2,
            "{backing:?}: the override's 2"
        );
        assert_eq!(admitted(&s, "k2", 7).await, 5, "{backing:?}: the file's 5");

        // Raised: the count goes on (a limit changed keeps its state, as on a reload).
        let (status, change) = put(&s, "k1", plan(3)).await;
        assert_eq!(status, 200);
        assert_eq!(change["before"]["limits"], plan(2), "what it replaced");
        assert!(change["version"].as_u64().unwrap() > first);
        assert_eq!(admitted(&s, "k1", 5).await, 1, "{backing:?}: the raised 3");

        // Read back, one and a page.
        let (status, one) = call(
            &s.http,
            reqwest::Method::GET,
            s.url("/v1/limits/o?entry=api_key=k1"),
            None,
        )
        .await;
        assert_eq!((status, &one["limits"]), (200, &plan(3)));
        for key in ["k3", "k4", "other"] {
            assert_eq!(put(&s, key, plan(9)).await.0, 200);
        }
        let page = |q: &'static str| {
            call(
                &s.http,
                reqwest::Method::GET,
                s.url(&format!("/v1/limits/o{q}")),
                None,
            )
        };
        let (_, p) = page("?prefix=api_key%3Dk&limit=2").await;
        let paths: Vec<&str> = p["overrides"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["entries"][0]["value"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["k1", "k3"], "{p}");
        assert_eq!(p["total"], 4);
        let next = p["next"].as_str().unwrap().to_owned();
        let (_, p) = call(
            &s.http,
            reqwest::Method::GET,
            s.url(&format!(
                "/v1/limits/o?prefix=api_key%3Dk&limit=2&after={next}"
            )),
            None,
        )
        .await;
        assert_eq!(p["overrides"][0]["entries"][0]["value"], "k4", "{p}");
        assert_eq!(p["next"], Value::Null, "the last page");

        // Removed: the file's rule for k1 again, its counter untouched so far.
        let delete = s.url("/v1/limits/o?entry=api_key=k1");
        let (status, change) = call(&s.http, reqwest::Method::DELETE, delete.clone(), None).await;
        assert_eq!(status, 200);
        assert_eq!(change["after"], Value::Null);
        let (status, again) = call(&s.http, reqwest::Method::DELETE, delete, None).await;
        assert_eq!(
            (status, &again["error"]["kind"]),
            (404, &json!("no_override"))
        );
        assert_eq!(
            admitted(&s, "k1", 7).await,
            5,
            "{backing:?}: the file's 5 again"
        );

        // The path's history, newest first: removed, raised, set.
        let (_, h) = page("/history?entry=api_key=k1").await;
        let changes: Vec<(Value, Value)> = h["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["before"]["limits"].clone(), c["after"]["limits"].clone()))
            .collect();
        assert_eq!(
            changes,
            [
                (plan(3), Value::Null),
                (plan(2), plan(3)),
                (Value::Null, plan(2))
            ],
            "{backing:?}: {h}"
        );
        let metrics = s.get_text("/metrics").await;
        let puts = spillway_testkit::metric(&metrics, "spillway_override_changes_total{op=\"put\"");
        assert!(puts >= 5, "changes are counted: {puts}");
    }
}

#[tokio::test]
async fn a_bad_override_is_refused_with_its_field_and_nothing_changes() {
    for backing in support::backings() {
        let s = Server::start("overrides-bad", &[("o.yaml", POLICY)], backing.clone()).await;
        let bad_window = json!([{ "algorithm": "gcra", "limit": 10, "window": "soon" }]);
        let (status, e) = put(&s, "k1", bad_window).await;
        assert_eq!(status, 400, "{backing:?}: {e}");
        assert_eq!(e["error"]["kind"], "invalid_override");
        assert_eq!(e["error"]["fields"][0]["field"], "limits[0].window", "{e}");

        let (status, e) = put(&s, "k*", plan(2)).await;
        assert_eq!(
            (status, &e["error"]["fields"][0]["field"]),
            (400, &json!("entries[0].value"))
        );
        let odd_key = json!({ "entries": [{ "key": "a=b", "value": "x" }], "limits": plan(2) });
        let url = s.url("/v1/limits/o");
        let (status, e) = call(&s.http, reqwest::Method::PUT, url.clone(), Some(&odd_key)).await;
        assert_eq!(
            (status, &e["error"]["fields"][0]["field"]),
            (400, &json!("entries[0].key"))
        );
        let unknown_field = json!({ "entries": [], "limits": [], "why": 1 });
        let (status, e) = call(
            &s.http,
            reqwest::Method::PUT,
            url.clone(),
            Some(&unknown_field),
        )
        .await;
        assert_eq!(
            (status, &e["error"]["fields"][0]["field"]),
            (400, &json!("body")),
            "{e}"
        );
        let (status, e) = call(
            &s.http,
            reqwest::Method::PUT,
            s.url("/v1/limits/nowhere"),
            Some(&put_body("k1", plan(2))),
        )
        .await;
        assert_eq!(
            (status, &e["error"]["kind"]),
            (404, &json!("unknown_domain"))
        );
        let (status, e) = call(
            &s.http,
            reqwest::Method::GET,
            s.url("/v1/limits/o/history"),
            None,
        )
        .await;
        assert_eq!(
            (status, &e["error"]["fields"][0]["field"]),
            (400, &json!("entry"))
        );
        // A page or a history longer than the document's bounds, or negative, is refused
        // (not quietly clamped: schemathesis holds the API to its schema).
        for query in [
            "/v1/limits/o?limit=1001",
            "/v1/limits/o?limit=0",
            "/v1/limits/o/history?entry=api_key%3Dk1&limit=-1",
            "/v1/limits/o/history?entry=api_key%3Dk1&limit=10001",
        ] {
            let (status, e) = call(&s.http, reqwest::Method::GET, s.url(query), None).await;
            assert_eq!(
                (status, &e["error"]["fields"][0]["field"]),
                (400, &json!("limit")),
                "{query}: {e}"
            );
        }

        // Nothing was kept: no override, no change, the file's 5.
        let (_, p) = call(&s.http, reqwest::Method::GET, s.url("/v1/limits/o"), None).await;
        assert_eq!(p["total"], 0, "{backing:?}: {p}");
        assert_eq!(admitted(&s, "k1", 7).await, 5);
    }
}

/// A bulk file (NDJSON) sets thousands at once (in parts: more than one part here),
/// each enforced and audited; a file with one bad line among 10,000 is refused whole,
/// naming the line, and sets nothing.
#[tokio::test]
async fn a_bulk_import_sets_every_line_or_none() {
    let line = |key: &str, limits: &Value| put_body(key, limits.clone()).to_string();
    for backing in support::backings() {
        let s = Server::start("overrides-import", &[("o.yaml", POLICY)], backing.clone()).await;
        let url = s.url("/v1/limits/o/import");
        let import = |text: String| {
            let (http, url) = (s.http.clone(), url.clone());
            async move {
                let r = http
                    .post(url)
                    .header("content-type", "application/x-ndjson")
                    .body(text)
                    .send()
                    .await
                    .unwrap();
                (
                    r.status().as_u16(),
                    r.json::<Value>().await.unwrap_or(Value::Null),
                )
            }
        };
        let n = 2 * spillway_server::limits::IMPORT_PART + 500;
        let file: Vec<String> = (0..n).map(|i| line(&format!("c{i}"), &plan(2))).collect();
        let (status, r) = import(file.join("\n")).await;
        assert_eq!(
            (status, &r["imported"]),
            (200, &json!(n)),
            "{backing:?}: {r}"
        );
        for key in ["c0", &format!("c{}", n - 1)] {
            assert_eq!(
                admitted(&s, key, 4).await,
                2,
                "{backing:?}: {key}'s plan of 2"
            );
        }
        let (_, page) = call(
            &s.http,
            reqwest::Method::GET,
            s.url("/v1/limits/o?limit=1"),
            None,
        )
        .await;
        assert_eq!(page["total"], n, "{page}");
        let (_, h) = call(
            &s.http,
            reqwest::Method::GET,
            s.url("/v1/limits/o/history?entry=api_key%3Dc7"),
            None,
        )
        .await;
        assert_eq!(h["changes"][0]["after"]["limits"], plan(2), "audited: {h}");

        // 10,000 lines, the 9,000th bad: refused, nothing set, the line named.
        let mut file: Vec<String> = (0..10_000)
            .map(|i| line(&format!("d{i}"), &plan(3)))
            .collect();
        file[8_999] = line(
            "d8999",
            &json!([{ "algorithm": "gcra", "limit": 1, "window": "soon" }]),
        );
        let (status, e) = import(file.join("\n")).await;
        assert_eq!(status, 400, "{e}");
        assert_eq!(
            e["error"]["fields"][0]["field"], "line 9000: limits[0].window",
            "{e}"
        );
        let (_, page) = call(
            &s.http,
            reqwest::Method::GET,
            s.url("/v1/limits/o?limit=1"),
            None,
        )
        .await;
        assert_eq!(page["total"], n, "nothing of the refused file: {page}");
        assert_eq!(admitted(&s, "d0", 7).await, 5, "the file's 5");

        let (status, e) = import(String::from("not json")).await;
        assert_eq!(
            (status, &e["error"]["fields"][0]["field"]),
            (400, &json!("line 1: line"))
        );
    }
}

/// What a hostile caller tries on the admin API: no token or a wrong one, the check
/// port, an override of 10,000 limits or a path of 10,000 entries, a body over the
/// bound. Refused, nothing written.
#[tokio::test]
async fn hostile_changes_are_refused_and_nothing_is_half_written() {
    let s = Server::start_with(
        "overrides-hostile",
        &[("o.yaml", POLICY)],
        support::Backing::Memory,
        |settings| settings.admin.token = Some(spillway_redis::Password::new("s3cret")),
    )
    .await;
    let send = |method: reqwest::Method, url: String, auth: Option<&'static str>, body: String| {
        let http = s.http.clone();
        async move {
            let mut r = http
                .request(method, url)
                .body(body)
                .header("content-type", "application/json");
            if let Some(a) = auth {
                r = r.header("authorization", a);
            }
            let r = r.send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let good = put_body("k1", plan(2)).to_string();
    let changes = [
        (reqwest::Method::PUT, "/v1/limits/o", good.clone()),
        (
            reqwest::Method::DELETE,
            "/v1/limits/o?entry=api_key%3Dk1",
            String::new(),
        ),
        (reqwest::Method::POST, "/v1/limits/o/import", good.clone()),
        (reqwest::Method::GET, "/v1/limits/o", String::new()),
    ];
    for (method, path, body) in &changes {
        for auth in [None, Some("Bearer wrong"), Some("Basic b3BzOndyb25n")] {
            let (status, e) = send(method.clone(), s.url(path), auth, body.clone()).await;
            assert_eq!(
                (status, &e["error"]["kind"]),
                (401, &json!("unauthorized")),
                "{method} {path} {auth:?}"
            );
        }
        let (status, _) = send(
            method.clone(),
            s.check_url(path),
            Some("Bearer s3cret"),
            body.clone(),
        )
        .await;
        assert_eq!(status, 404, "{method} {path} on the check port");
    }
    let token = Some("Bearer s3cret");
    let one = json!({ "algorithm": "gcra", "limit": 10, "window": "1s" });
    let many_limits = put_body("k1", Value::Array(vec![one; 10_000])).to_string();
    let deep = json!({
        "entries": (0..10_000).map(|i| json!({ "key": format!("k{i}"), "value": "v" })).collect::<Vec<_>>(),
        "limits": plan(2),
    })
    .to_string();
    let long_value = put_body(&"x".repeat(10_000), plan(2)).to_string();
    for (what, body) in [
        ("10,000 limits", many_limits.clone()),
        ("10,000 entries", deep),
        ("a 10 kB value", long_value),
    ] {
        let (status, e) = send(
            reqwest::Method::PUT,
            s.url("/v1/limits/o"),
            token,
            body.clone(),
        )
        .await;
        assert!(status == 400 || status == 413, "{what}: {status} {e}");
        let (status, e) = send(
            reqwest::Method::POST,
            s.url("/v1/limits/o/import"),
            token,
            body,
        )
        .await;
        assert_eq!(status, 400, "{what} in an import: {e}");
    }
    // Over the import's bound: 413, read no further than a little past it.
    let huge = "x".repeat(spillway_server::limits::IMPORT_MAX_BYTES + 1);
    let (status, e) = send(
        reqwest::Method::POST,
        s.url("/v1/limits/o/import"),
        token,
        huge,
    )
    .await;
    assert_eq!(
        (status, &e["error"]["kind"]),
        (413, &json!("body_too_large"))
    );
    // The check port reads no more than its own bound, whatever the path.
    let big = "x".repeat(64 * 1024 + 1);
    let (status, _) = send(
        reqwest::Method::POST,
        s.check_url("/v1/limits/o/import"),
        None,
        big,
    )
    .await;
    assert_eq!(status, 413, "the check port's bound, not the import's");

    let (status, page) = send(
        reqwest::Method::GET,
        s.url("/v1/limits/o"),
        token,
        String::new(),
    )
    .await;
    assert_eq!(
        (status, &page["total"]),
        (200, &json!(0)),
        "nothing written: {page}"
    );
    assert_eq!(admitted(&s, "k1", 7).await, 5);
}

/// `explain` names the override a path has; `/v1/config` counts each domain's.
#[tokio::test]
async fn explain_and_the_config_name_the_override() {
    let s = Server::start(
        "overrides-explain",
        &[("o.yaml", POLICY)],
        support::Backing::Memory,
    )
    .await;
    assert_eq!(put(&s, "k1", plan(2)).await.0, 200);
    let (_, e) = s.post("/v1/explain", &body("k1")).await;
    let d = &e["descriptors"][0];
    assert_eq!(d["overridden_by"]["path"], "api_key=k1", "{e}");
    assert_eq!(d["limits"][0]["rule"], "plan", "{e}");
    let (_, e) = s.post("/v1/explain", &body("k2")).await;
    assert!(e["descriptors"][0].get("overridden_by").is_none(), "{e}");
    let config: Value = serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
    assert_eq!(config["domains"][0]["overrides"], 1, "{config}");
}

/// On memory, overrides are kept in a journal beside the policies: a restart replays
/// it, a last line cut short by a crash is passed over, and the author is the admin
/// token's name when one is set.
#[tokio::test]
async fn a_restart_on_memory_keeps_the_overrides_from_the_journal() {
    let dir = support::tempdir("overrides-journal");
    std::fs::write(dir.join("o.yaml"), POLICY).unwrap();
    let token_file = dir.with_extension("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let config = || {
        let mut c = Config::ephemeral(&dir);
        c.admin.token = Some(spillway_redis::Password::from_file(&token_file).unwrap());
        c
    };
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let start = || async {
        let store = AnyStore::Memory(MemoryStore::new());
        support::start(config(), store, Arc::new(clock.clone()))
            .await
            .unwrap()
    };
    let http = reqwest::Client::new();
    let send = |running: &Running, method, path: &str, body: Option<Value>| {
        let r = http
            .request(method, admin(running, path))
            .bearer_auth("s3cret");
        let r = match body {
            Some(b) => r.json(&b),
            None => r,
        };
        async move {
            let r = r.send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let a = start().await;
    for (key, limit) in [("k1", 2), ("k2", 3), ("k1", 4)] {
        let (status, c) = send(
            &a,
            reqwest::Method::PUT,
            "/v1/limits/o",
            Some(put_body(key, plan(limit))),
        )
        .await;
        assert_eq!(status, 200, "{c}");
        assert_eq!(
            c["by"], "token",
            "the token's name, never what the request says"
        );
    }
    let (status, _) = send(
        &a,
        reqwest::Method::DELETE,
        "/v1/limits/o?entry=api_key=k2",
        None,
    )
    .await;
    assert_eq!(status, 200);
    a.stop().await;

    let journal = Config::ephemeral(&dir).overrides_file().unwrap();
    assert!(journal.exists(), "{}", journal.display());
    // A crash while a line was being written: the line was never applied.
    let mut text = std::fs::read_to_string(&journal).unwrap();
    text.push_str(
        r#"{"version":99,"by":"token","at_ms":1,"before":null,"after":{"domain":"o","ent"#,
    );
    std::fs::write(&journal, text).unwrap();

    let b = start().await;
    let (status, one) = send(
        &b,
        reqwest::Method::GET,
        "/v1/limits/o?entry=api_key=k1",
        None,
    )
    .await;
    assert_eq!((status, &one["limits"]), (200, &plan(4)), "{one}");
    let (status, _) = send(
        &b,
        reqwest::Method::GET,
        "/v1/limits/o?entry=api_key=k2",
        None,
    )
    .await;
    assert_eq!(status, 404, "removed before the restart");
    let (_, h) = send(
        &b,
        reqwest::Method::GET,
        "/v1/limits/o/history?entry=api_key=k1",
        None,
    )
    .await;
    assert_eq!(h["changes"].as_array().unwrap().len(), 2, "{h}");
    // A change after the cut line starts a line of its own and is kept.
    let (status, _) = send(
        &b,
        reqwest::Method::PUT,
        "/v1/limits/o",
        Some(put_body("k5", plan(1))),
    )
    .await;
    assert_eq!(status, 200);
    b.stop().await;
    let c = start().await;
    let (_, p) = send(&c, reqwest::Method::GET, "/v1/limits/o", None).await;
    assert_eq!(p["total"], 2, "{p}");
    c.stop().await;
}

/// On Redis, a change made on one replica is served by another at its next poll (the
/// delay measured and printed; the bound asserted is a loaded machine's), and a replica
/// started later has every override before it serves.
#[tokio::test]
async fn replicas_share_overrides_and_a_new_replica_starts_with_them() {
    let url = spillway_testkit::redis::standalone_url();
    let prefix = spillway_testkit::redis::unique_prefix("overrides-replicas");
    let dir = support::tempdir("overrides-replicas");
    std::fs::write(dir.join("o.yaml"), POLICY).unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(support::T0));
    let a = support::start_on_redis(&url, &prefix, &dir, &clock).await;
    let b = support::start_on_redis(&url, &prefix, &dir, &clock).await;
    let http = reqwest::Client::new();
    let check = |r: &Running, key: &str| {
        let req = http
            .post(format!("http://{}/v1/check", r.http_addr))
            .json(&body(key));
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let set_at = SystemClock.now();
    let (status, c) = call(
        &http,
        reqwest::Method::PUT,
        admin(&a, "/v1/limits/o"),
        Some(&put_body("k1", plan(1))),
    )
    .await;
    assert_eq!(status, 200, "{c}");
    // On A at once: applied before the answer.
    assert_eq!(check(&a, "k1").await, 200);
    assert_eq!(
        check(&a, "k1").await,
        429,
        "A serves the override's 1 at once"
    );
    // On B at its next poll: k1's one admission is spent (shared counter).
    let seen = support::eventually(|| async {
        let (_, one) = call(
            &http,
            reqwest::Method::GET,
            admin(&b, "/v1/limits/o?entry=api_key=k1"),
            None,
        )
        .await;
        one["limits"] == plan(1)
    })
    .await;
    assert!(seen, "B applies the change");
    eprintln!(
        "a change reached the other replica after {:?}",
        SystemClock.now().duration_since(set_at)
    );
    assert_eq!(check(&b, "k1").await, 429, "B decides with the override");
    assert_eq!(check(&b, "k2").await, 200, "and the file for the rest");

    let c = support::start_on_redis(&url, &prefix, &dir, &clock).await;
    let (status, one) = call(
        &http,
        reqwest::Method::GET,
        admin(&c, "/v1/limits/o?entry=api_key=k1"),
        None,
    )
    .await;
    assert_eq!(
        (status, &one["limits"]),
        (200, &plan(1)),
        "a new replica starts with them"
    );
    assert_eq!(check(&c, "k1").await, 429);
    for r in [a, b, c] {
        r.stop().await;
    }
}
