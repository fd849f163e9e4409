//! `algorithm: concurrency` in a policy: "at most 2 requests in flight per tenant",
//! taken over `/v1/acquire` (or `/v1/check`) and `ShouldRateLimit`, given back over
//! `/v1/release` and by a descriptor led by a `release` entry (Envoy's stream-done
//! call), lapsing at the end of the lease; on memory and Redis.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::{Server, backings};

const POLICY: &str = "
domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: request_id
        limits:
          - { name: in-flight, algorithm: concurrency, limit: 2, window: 30s }
";

/// A take of `tenant`'s hold `id` is refused until `left` has passed, and admitted
/// then: the holds in its way lapse at the end of their lease, not before.
async fn admitted_after(s: &Server, tenant: &str, id: &str, left: Duration, what: &str) {
    s.advance(left - Duration::from_secs(1));
    let (status, body) = s.post("/v1/acquire", &request(tenant, id)).await;
    assert_eq!(status, 429, "{what}: held until the lease ends: {body}");
    s.advance(Duration::from_secs(1));
    let (status, body) = s.post("/v1/acquire", &request(tenant, id)).await;
    assert_eq!(status, 200, "{what}: lapsed: {body}");
}

fn request(tenant: &str, id: &str) -> serde_json::Value {
    json!({ "domain": "api", "descriptors": [{ "entries": [
        { "key": "tenant", "value": tenant },
        { "key": "request_id", "value": id },
    ] }] })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_in_flight_per_tenant_given_back_or_lapsed() {
    for backing in backings() {
        let s = Server::start("holds", &[("api.yaml", POLICY)], backing.clone()).await;
        let (status, body) = s.post("/v1/acquire", &request("acme", "r1")).await;
        assert_eq!(status, 200, "{backing:?}: {body}");
        let (status, body) = s.post("/v1/check", &request("acme", "r2")).await;
        assert_eq!(status, 200, "{backing:?}: {body}");
        assert_eq!(body["descriptors"][0]["remaining"], 0, "{body}");
        let (status, body) = s.post("/v1/acquire", &request("acme", "r3")).await;
        assert_eq!(status, 429, "{backing:?}: a third in flight: {body}");
        assert_eq!(
            body["denied_by"],
            json!({ "descriptor": 0, "rule": "in-flight" })
        );
        // Another tenant has its own slots. A take naming a held id is one more hold
        // (#60: it was admitted as a renewal whatever the others held); /v1/renew
        // renews.
        let (status, _) = s.post("/v1/acquire", &request("other", "r3")).await;
        assert_eq!(status, 200, "{backing:?}");
        let (status, _) = s.post("/v1/acquire", &request("acme", "r1")).await;
        assert_eq!(status, 429, "{backing:?}: r1 again is one more, and full");
        let (status, body) = s.post("/v1/renew", &request("acme", "r1")).await;
        assert_eq!(status, 200, "{backing:?}: r1 renews: {body}");
        // The denied take's release gives back its mark, not r1's hold.
        let (status, body) = s.post("/v1/release", &request("acme", "r1")).await;
        assert_eq!(status, 200, "{backing:?}: {body}");
        assert_eq!(
            body["descriptors"][0]["remaining"], 0,
            "{backing:?}: {body}"
        );
        let (status, body) = s.post("/v1/renew", &request("acme", "r9")).await;
        assert_eq!(
            status, 429,
            "{backing:?}: r9 is not held and does not fit: {body}"
        );

        // Given back over HTTP, its slot is free at once.
        let (status, body) = s.post("/v1/release", &request("acme", "r1")).await;
        assert_eq!(status, 200, "{backing:?}: {body}");
        assert_eq!(
            body["descriptors"][0]["remaining"], 1,
            "{backing:?}: {body}"
        );
        let (status, _) = s.post("/v1/acquire", &request("acme", "r3")).await;
        assert_eq!(status, 200, "{backing:?}: r1's slot");

        // Over gRPC: taken by the request-path descriptor, given back by the
        // stream-done one (its `release` entry first).
        let taken = s
            .should("api", &[("tenant", "acme"), ("request_id", "g1")])
            .await;
        assert_eq!(taken.overall_code, 2, "{backing:?}: full (r2, r3)");
        let released = s
            .should(
                "api",
                &[("release", "1"), ("tenant", "acme"), ("request_id", "r2")],
            )
            .await;
        assert_eq!(released.overall_code, 1, "{backing:?}: OK");
        let taken = s
            .should("api", &[("tenant", "acme"), ("request_id", "g1")])
            .await;
        assert_eq!(taken.overall_code, 1, "{backing:?}: r2's slot");

        // Nobody gives back g1 and r3: they lapse at the end of the lease, not before.
        let what = format!("{backing:?}");
        admitted_after(&s, "acme", "late", Duration::from_secs(30), &what).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_takes_no_usage_and_a_release_counts_nothing_else() {
    let policy = "
domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: request_id
        limits:
          - { name: in-flight, algorithm: concurrency, limit: 1 }
          - { name: per-request, algorithm: fixed_window, limit: 5, window: 1h }
";
    for backing in backings() {
        let s = Server::start("holds-usage", &[("api.yaml", policy)], backing.clone()).await;
        let mut usage = request("acme", "r1");
        usage["usage"] = json!(true);
        let (status, body) = s.post("/v1/check", &usage).await;
        assert_eq!(status, 400, "{backing:?}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("/v1/release"),
            "{body}"
        );
        for _ in 0..3 {
            let (status, body) = s.post("/v1/release", &request("acme", "r1")).await;
            assert_eq!(status, 200, "{backing:?}: {body}");
        }
        // The releases counted nothing on the fixed window: five takes (each given
        // back before the next) fit it, the sixth does not.
        for n in 1..=5 {
            let (status, body) = s.post("/v1/acquire", &request("acme", "r1")).await;
            assert_eq!(status, 200, "{backing:?}: take {n}: {body}");
            let (status, body) = s.post("/v1/release", &request("acme", "r1")).await;
            assert_eq!(status, 200, "{backing:?}: release {n}: {body}");
        }
        let (status, body) = s.post("/v1/acquire", &request("acme", "r1")).await;
        assert_eq!(status, 429, "{backing:?}: {body}");
        assert_eq!(body["denied_by"]["rule"], "per-request", "{body}");
        // The default lease is a minute.
        let (status, body) = s.post("/v1/acquire", &request("lease", "r1")).await;
        assert_eq!(status, 200, "{backing:?}: {body}");
        let what = format!("{backing:?}: the default lease, a minute");
        admitted_after(&s, "lease", "r2", Duration::from_secs(60), &what).await;
    }
}

/// 200 clients on 3 replicas sharing one Redis (standalone, then Cluster), each
/// taking a hold of one tenant's 5 over HTTP, holding it 0–20 ms and giving it back,
/// a few times over: the holds live at once, measured from outside (each client's own
/// span from the answer of its take to the sending of its release, inside the span
/// the store held it), never exceed 5; at the end every slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_the_limit_in_flight_across_three_replicas() {
    use rand::{Rng, SeedableRng};
    use spillway_core::{Clock, ManualClock, SystemClock, Timestamp};

    const LIMIT: usize = 5;
    let policy = POLICY.replace("limit: 2, window: 30s", "limit: 5, window: 30s");
    for url in [
        spillway_testkit::redis::standalone_url(),
        spillway_testkit::redis::cluster_url(),
    ] {
        let prefix = spillway_testkit::redis::unique_prefix("holds-replicas");
        let dir = support::tempdir("holds-replicas");
        std::fs::write(dir.join("api.yaml"), &policy).unwrap();
        let clock = ManualClock::new(Timestamp::from_secs(support::T0));
        let mut replicas = Vec::new();
        for _ in 0..3 {
            replicas.push(support::start_on_redis(&url, &prefix, &dir, &clock).await);
        }
        // Real time, as the clients see it (the replicas decide on the manual clock,
        // which stands still: no hold lapses).
        let start = SystemClock.now();
        let clients: Vec<_> = (0..200)
            .map(|c| {
                let base = format!("http://{}", replicas[c % 3].http_addr);
                tokio::spawn(async move {
                    let http = reqwest::Client::new();
                    let mut rng = rand::rngs::StdRng::seed_from_u64(c as u64);
                    let mut spans = Vec::new();
                    let mut denied = 0;
                    for n in 0..4 {
                        let body = request("acme", &format!("c{c}-{n}"));
                        let taken = http
                            .post(format!("{base}/v1/acquire"))
                            .json(&body)
                            .send()
                            .await
                            .unwrap();
                        if taken.status() != 200 {
                            let status = taken.status();
                            assert_eq!(status, 429, "{}", taken.text().await.unwrap());
                            denied += 1;
                            continue;
                        }
                        let from = SystemClock.now().duration_since(start);
                        let hold = rng.random_range(0..20);
                        tokio::time::sleep(Duration::from_millis(hold)).await;
                        let to = SystemClock.now().duration_since(start);
                        let given = http
                            .post(format!("{base}/v1/release"))
                            .json(&body)
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(given.status(), 200);
                        spans.push((from, to));
                    }
                    (spans, denied)
                })
            })
            .collect();
        let mut edges = Vec::new();
        let mut denied = 0;
        for c in clients {
            let (spans, d) = c.await.unwrap();
            denied += d;
            for (from, to) in spans {
                edges.push((from, 1i32));
                edges.push((to, -1));
            }
        }
        // Ends before starts at one instant: spans that only touch do not overlap.
        edges.sort();
        let (mut live, mut most) = (0i32, 0i32);
        for (_, step) in &edges {
            live += step;
            most = most.max(live);
        }
        assert!(most as usize <= LIMIT, "{url}: {most} holds at once");
        assert!(
            denied > 0 && edges.len() / 2 >= LIMIT,
            "{url}: the limit was reached ({denied} denied)"
        );
        // Every slot free: five more holds fit, a sixth does not.
        let s = &replicas[0];
        let http = reqwest::Client::new();
        for n in 0..=LIMIT {
            let status = http
                .post(format!("http://{}/v1/acquire", s.http_addr))
                .json(&request("acme", &format!("end-{n}")))
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status == 200, n < LIMIT, "{url}: take {n} at the end");
        }
    }
}

/// `/v1/explain` on a concurrency rule: the holds in use and when the oldest lapses,
/// taking nothing (a take after it is admitted as before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_holds_in_use_and_when_the_oldest_lapses() {
    for backing in backings() {
        let s = Server::start("holds-explain", &[("api.yaml", POLICY)], backing.clone()).await;
        let look = request("acme", "look");
        let explain = || s.post("/v1/explain", &look);
        let (status, body) = explain().await;
        assert_eq!(status, 200, "{body}");
        let holds = &body["descriptors"][0]["limits"][0]["state"]["holds"];
        assert_eq!(holds["in_use"], 0, "{backing:?}: {body}");
        assert!(holds["oldest_lapses_in_ms"].is_null(), "{body}");

        assert_eq!(s.post("/v1/acquire", &request("acme", "r1")).await.0, 200);
        s.advance(Duration::from_secs(10));
        assert_eq!(s.post("/v1/acquire", &request("acme", "r2")).await.0, 200);
        for _ in 0..2 {
            let (_, body) = explain().await;
            let holds = &body["descriptors"][0]["limits"][0]["state"]["holds"];
            assert_eq!(holds["in_use"], 2, "{backing:?}: {body}");
            // r1, taken 10 s ago with a 30 s lease.
            assert_eq!(holds["oldest_lapses_in_ms"], 20_000, "{backing:?}: {body}");
        }
        assert_eq!(
            s.post("/v1/acquire", &request("acme", "r3")).await.0,
            429,
            "{backing:?}: the explains took nothing"
        );
    }
}

/// A `release` entry is a release only where the rest reaches a concurrency rule: a
/// tree with a `release` key of its own is matched as it is, and `/v1/release` of a
/// descriptor with no hold to give back counts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_key_of_a_tree_of_its_own_is_matched_as_it_is() {
    let policy = "
domain: api
descriptors:
  - key: release
    descriptors:
      - key: channel
        limits:
          - { name: deploys, algorithm: fixed_window, limit: 1, window: 1h }
";
    let s = Server::start(
        "holds-release-key",
        &[("api.yaml", policy)],
        backings()[0].clone(),
    )
    .await;
    let deploy = json!({ "domain": "api", "descriptors": [{ "entries": [
        { "key": "release", "value": "v2" },
        { "key": "channel", "value": "stable" },
    ] }] });
    let (status, _) = s.post("/v1/release", &deploy).await;
    assert_eq!(status, 200);
    assert_eq!(
        s.post("/v1/check", &deploy).await.0,
        200,
        "the release counted nothing"
    );
    assert_eq!(
        s.post("/v1/check", &deploy).await.0,
        429,
        "matched as it is: 1 an hour"
    );
}
