//! What the layer records, read back from a Prometheus recorder (its own test binary:
//! the recorder is process-wide). Shadow mode's whole point is this record.

#[path = "it/support.rs"]
mod support;

use metrics_exporter_prometheus::PrometheusBuilder;
use spillway_core::MemoryStore;
use spillway_tower::{Mode, RateLimitLayer};
use support::{clock, per_ip, per_minute, serve_layer};

#[tokio::test]
async fn shadow_mode_records_what_it_would_have_denied() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();

    let layer = RateLimitLayer::builder(MemoryStore::new())
        .clock(clock())
        .limit(per_ip(per_minute(2)))
        .mode(Mode::Shadow)
        .build()
        .unwrap();
    let client = serve_layer(layer).await;
    assert_eq!(client.admitted(5, "/", &[]).await, 5);

    let text = handle.render();
    for line in [
        r#"spillway_tower_requests_total{outcome="allowed"} 2"#,
        r#"spillway_tower_requests_total{outcome="shadow_limited"} 3"#,
        r#"spillway_tower_denials_total{limit="per-ip"} 3"#,
    ] {
        assert!(text.contains(line), "no `{line}` in:\n{text}");
    }
}
