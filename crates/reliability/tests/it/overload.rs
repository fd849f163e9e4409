//! Open-loop overload at 3x the limit on one key per algorithm, on the shared standalone
//! server and the Cluster: no exact algorithm admits past its promise in any window.
//! (The long run behind docs/reliability.md: `spillway-reliability overload`.)

use std::time::Duration;

use spillway_redis::RedisStore;
use spillway_reliability::overload::{self, OVERLOAD_HEADER, Overload};
use spillway_testkit::redis::{cluster_url, standalone_url, unique_prefix};

async fn overload_on(url: &str) {
    // The promise is under test, not the speed: a busy machine that stalls a call past the
    // service's 10 ms must not turn into an error here.
    let store = RedisStore::builder(url)
        .prefix(unique_prefix("overload"))
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let o = Overload {
        limit: 100,
        window: Duration::from_secs(1),
        multiplier: 3,
        length: Duration::from_secs(3),
    };
    let mut table = vec![OVERLOAD_HEADER.to_string()];
    let mut broken = 0;
    for report in overload::run_all(&store, o).await.unwrap() {
        assert_eq!(report.errors, 0, "{report}");
        assert!(
            report.admitted >= 200,
            "the load reached the limit: {report}"
        );
        broken += report.violations();
        table.push(report.to_string());
    }
    let table = table.join("\n");
    assert_eq!(broken, 0, "{table}");
    println!("{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_on_standalone_redis_keeps_every_promise() {
    let _turn = crate::turn().await;
    overload_on(&standalone_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_on_redis_cluster_keeps_every_promise() {
    let _turn = crate::turn().await;
    overload_on(&cluster_url()).await;
}
