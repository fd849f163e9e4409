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
