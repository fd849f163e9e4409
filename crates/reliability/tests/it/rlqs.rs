//! The RLQS stream in the fault matrix (`spillway_reliability::rlqs`): under each fault
//! that keeps Redis's data, no share is granted without Redis, the shares Envoy holds
//! never add up to more than the limit, each stream's share comes back after the fault,
//! a stream opened in place of a dropped one gets a share at once, and an Envoy whose
//! stream broke is answered its share on its new one at once. (The whole set,
//! with the published table: `cargo run --release -p spillway-reliability -- rlqs`.)

use std::time::Duration;

use spillway_reliability::Fault;
use spillway_reliability::fault::Transport;
use spillway_reliability::rlqs::{self, RLQS_HEADER};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_streams_keep_their_promises_under_faults() {
    let _turn = crate::turn().await;
    let mut table = vec![RLQS_HEADER.to_string()];
    let mut failures = Vec::new();
    for fault in [
        Fault::Stop,
        Fault::ScriptFlush,
        Fault::ProxyDrop,
        Fault::ProxyReset,
    ] {
        let report = rlqs::run(fault, Transport::Plain).await.unwrap();
        table.push(report.to_string());
        if report.violations > 0 {
            failures.push(format!("{report}: {:?}", report.examples));
        }
        // Reports come every 100 ms, a grant's timeout (and RLQS's own breaker's cool
        // down) is 200 ms, the connection is rebuilt when the breaker opens: a report
        // soon after the fault heals brings the share back.
        match report.recovery {
            Some(r) if r < Duration::from_secs(2) => {}
            other => failures.push(format!("{report}: recovery {other:?}")),
        }
        // Shares were granted before and after: the trial saw them.
        assert!(report.most_assigned > 0.0, "{report}");
        assert!(report.came_back.is_some(), "{report}");
    }
    let table = table.join("\n");
    assert!(failures.is_empty(), "{failures:#?}\n{table}");
    println!("{table}");
}
