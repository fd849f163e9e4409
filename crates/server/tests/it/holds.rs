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
        // Another tenant has its own slots; a held id renews.
        let (status, _) = s.post("/v1/acquire", &request("other", "r3")).await;
        assert_eq!(status, 200, "{backing:?}");
        let (status, _) = s.post("/v1/acquire", &request("acme", "r1")).await;
        assert_eq!(status, 200, "{backing:?}: r1 renews");

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
        s.advance(Duration::from_secs(29));
        let (status, _) = s.post("/v1/acquire", &request("acme", "late")).await;
        assert_eq!(status, 429, "{backing:?}: held until the lease ends");
        s.advance(Duration::from_secs(1));
        let (status, body) = s.post("/v1/acquire", &request("acme", "late")).await;
        assert_eq!(status, 200, "{backing:?}: lapsed: {body}");
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
        let usage = json!({ "domain": "api", "usage": true, "descriptors": [{ "entries": [
            { "key": "tenant", "value": "acme" },
            { "key": "request_id", "value": "r1" },
        ] }] });
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
        // The releases counted nothing on the fixed window: five takes (the first,
        // then renewals) fit it, the sixth does not.
        for n in 1..=5 {
            let (status, body) = s.post("/v1/acquire", &request("acme", "r1")).await;
            assert_eq!(status, 200, "{backing:?}: take {n}: {body}");
        }
        let (status, body) = s.post("/v1/acquire", &request("acme", "r1")).await;
        assert_eq!(status, 429, "{backing:?}: {body}");
        assert_eq!(body["denied_by"]["rule"], "per-request", "{body}");
        // The default lease is a minute.
        s.advance(Duration::from_secs(59));
        let (status, _) = s.post("/v1/acquire", &request("acme", "r2")).await;
        assert_eq!(status, 429, "{backing:?}");
        s.advance(Duration::from_secs(1));
        let (status, _) = s.post("/v1/acquire", &request("acme", "r2")).await;
        assert_eq!(status, 200, "{backing:?}: the default lease, a minute");
    }
}
