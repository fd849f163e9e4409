//! Two services whose clocks are 5 s ahead and 5 s behind, sharing the test Redis in
//! server-time mode, loaded at 1.5x the limit each on one key: together they admit no
//! more than the limit in any window.

use std::time::Duration;

use spillway_reliability::skew;
use spillway_testkit::redis::standalone_url;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_with_skewed_clocks_admit_the_limit_together() {
    let _turn = crate::turn().await;
    let r = skew::run(
        &standalone_url(),
        Duration::from_secs(5),
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    assert!(r.admitted >= 200, "the load reached the limit: {r:?}");
    assert_eq!(r.violations(), 0, "{r:?}");
}
