//! Several budgets charged through several replicas stay exact.

use super::*;

/// Several budgets across replicas: three Spillways on one Redis (standalone, then
/// Cluster), six clients (two per user, each on its own replica) sending Envoy's two
/// calls: a look at the tenant's minute and month and the user's day, then the usage
/// (1–2,000 tokens, random) to all three. Whatever the replicas interleave, each budget
/// ends charged exactly what was reported to it: the month and each user's day by
/// their remaining, the minute (60,000, in debt by the end) by the time to pay it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_budgets_stay_exact_across_replicas() {
    use rand::{Rng, SeedableRng};
    use spillway_core::{ManualClock, Timestamp};

    const BUDGETS: &str = "
domain: ai
descriptors:
  - key: tenant
    limits:
      - { name: minute, algorithm: token_bucket, limit: 60000, window: 1m, metered: true }
      - { name: month, algorithm: fixed_window, limit: 5000000, period: month, metered: true }
    descriptors:
      - key: user
        limits:
          - { name: day, algorithm: fixed_window, limit: 200000, period: day, time_zone: Europe/Berlin, metered: true }
";
    const USERS: [&str; 3] = ["ann", "ben", "cat"];
    for url in [
        spillway_testkit::redis::standalone_url(),
        spillway_testkit::redis::cluster_url(),
    ] {
        let prefix = spillway_testkit::redis::unique_prefix("replicas");
        let dir = support::tempdir("replicas");
        std::fs::write(dir.join("ai.yaml"), BUDGETS).unwrap();
        let clock = ManualClock::new(Timestamp::from_secs(support::T0));
        let mut replicas = Vec::new();
        for _ in 0..3 {
            replicas.push(support::start_on_redis(&url, &prefix, &dir, &clock).await);
        }
        let clients: Vec<_> = (0..6)
            .map(|c| {
                let (user, addr) = (USERS[c % 3], replicas[c % 3].grpc_addr);
                tokio::spawn(async move {
                    let mut grpc = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(format!("http://{addr}"))
                        .await
                        .unwrap();
                    let mut rng = rand::rngs::StdRng::seed_from_u64(c as u64);
                    let mut reported = 0;
                    while grpc
                        .should_rate_limit(budgets(user, 0))
                        .await
                        .unwrap()
                        .into_inner()
                        .overall_code
                        == Code::Ok as i32
                    {
                        let used = rng.random_range(1..=2_000);
                        grpc.should_rate_limit(budgets(user, used)).await.unwrap();
                        reported += used;
                    }
                    (user, reported)
                })
            })
            .collect();
        let mut per_user = std::collections::HashMap::new();
        for client in clients {
            let (user, reported) = client.await.unwrap();
            *per_user.entry(user).or_insert(0u64) += reported;
        }
        let all: u64 = per_user.values().sum();
        // Each budget as `/v1/explain` reads it (a look, on one replica).
        let admin = replicas[0].admin_addr.expect("on by default");
        let http = reqwest::Client::new();
        for user in USERS {
            let body = json!({
                "domain": "ai", "cost": 0,
                "descriptors": [
                    { "entries": [{ "key": "tenant", "value": "t1" }] },
                    { "entries": [{ "key": "tenant", "value": "t1" }, { "key": "user", "value": user }] }
                ]
            });
            let explained: serde_json::Value = http
                .post(format!("http://{admin}/v1/explain"))
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let state =
                |d: usize, l: usize| explained["descriptors"][d]["limits"][l]["state"].clone();
            // The minute is in debt (60,000 at 1,000 a second): its wait in ms is the debt.
            let minute = state(0, 0);
            assert_eq!(minute["remaining"], 0, "{url}: {explained}");
            let debt = minute["retry_after_ms"].as_u64().unwrap();
            assert_eq!(60_000 + debt, all, "{url}: the minute");
            assert_eq!(
                state(0, 1)["remaining"],
                5_000_000 - all,
                "{url}: the month"
            );
            assert_eq!(
                state(1, 0)["remaining"],
                200_000 - per_user[user],
                "{url}: {user}'s day"
            );
        }
        eprintln!("{url}: {all} tokens over 3 replicas, {per_user:?}");
        for r in replicas {
            r.stop().await;
        }
    }
}
