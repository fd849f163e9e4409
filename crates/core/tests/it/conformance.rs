//! The conformance scenarios of `spillway-testkit`, against the memory store.

use spillway_core::MemoryStore;

#[tokio::test]
async fn memory_store_passes_every_conformance_scenario() {
    spillway_testkit::conformance::run_all(&MemoryStore::new()).await;
}

#[tokio::test]
async fn memory_store_passes_them_with_two_shards_too() {
    // Few shards: batches whose keys share a shard take one lock for several keys.
    let store = MemoryStore::builder().shards(2).max_keys(1000).build();
    spillway_testkit::conformance::run_all(&store).await;
}

#[tokio::test]
async fn through_a_guarded_store_with_the_deny_cache_on_too() {
    // The cache is off by default for a store in this process; forced on, it must change
    // no answer of any scenario.
    let breaker = spillway_core::Breaker::new(5, std::time::Duration::from_millis(500));
    let store = spillway_core::GuardedStore::new(MemoryStore::new(), breaker).deny_cache(1 << 20);
    spillway_testkit::conformance::run_all(&store).await;
}
