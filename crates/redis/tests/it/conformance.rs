//! The testkit's conformance tables, unchanged, against a real standalone Redis, a real
//! Redis Cluster and a Sentinel, each over TLS too, and Valkey 8 standalone and
//! Cluster, with the manual clock passed to the decision code; through core's
//! `GuardedStore` with its deny cache on, which must change no answer; and with the
//! decision code called as a script (`EVALSHA`, as on servers without functions)
//! rather than a function library.

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_passes_the_conformance_tables() {
    let store =
        support::caller_clock_store(&spillway_testkit::redis::standalone_url(), "conf").await;
    spillway_testkit::conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_passes_the_conformance_tables() {
    let store = support::caller_clock_store(&spillway_testkit::redis::cluster_url(), "conf").await;
    assert!(store.is_cluster());
    spillway_testkit::conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_passes_the_conformance_tables() {
    let store = support::caller_clock_store(&spillway_testkit::redis::sentinel_url(), "conf").await;
    spillway_testkit::conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_through_the_deny_cache_passes_the_conformance_tables() {
    let store =
        support::caller_clock_store(&spillway_testkit::redis::standalone_url(), "conf").await;
    let guarded = spillway_core::GuardedStore::new(
        store,
        spillway_core::Breaker::new(5, std::time::Duration::from_millis(500)),
    );
    assert!(
        guarded.deny_cache_ref().is_some(),
        "on by default for Redis"
    );
    spillway_testkit::conformance::run_all(&guarded).await;
}

/// The same tables over TLS (client certificates required), on Valkey 8 and on Redis
/// 6.2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_valkey_and_redis_6_2_pass_the_conformance_tables() {
    for (name, url) in &support::topologies()[2..] {
        let store = support::caller_clock_store(url, "conf").await;
        assert_eq!(store.is_cluster(), name.ends_with("cluster"), "{name}");
        println!("{name}: {url}");
        spillway_testkit::conformance::run_all(&store).await;
    }
}

/// The same tables with every call an `EVALSHA` of the script, as on Redis before 7.0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_a_script_standalone_and_cluster_pass_the_conformance_tables() {
    for (name, url) in support::targets() {
        let prefix = spillway_testkit::redis::unique_prefix("conf");
        let store = support::script_store(&url, spillway_redis::TimeSource::Caller, &prefix).await;
        println!("{name}, as a script: {url}");
        spillway_testkit::conformance::run_all(&store).await;
    }
}
