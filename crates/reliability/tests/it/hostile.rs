//! Every malformed request class on `/v1/check`, `/json` and gRPC, against a real
//! service on a real Redis: refused with a 4xx (INVALID_ARGUMENT) that says what is
//! wrong, no panic, no 5xx, no store call; the valid controls reach the store. And slow
//! clients of every kind are closed after the read timeout while others are served, and
//! so are hostile TLS clients (plaintext, foreign or expired certificates, a stalled or
//! oversized handshake), each counted.
//! (The published table: `cargo run --release -p spillway-reliability -- hostile`.)

use std::fmt::Display;
use std::time::Duration;

use spillway_reliability::hostile::{self, HOSTILE_HEADER};
use spillway_reliability::load::Answer;

/// A Markdown table: `header`, then one row per item.
fn table(header: &str, rows: &[impl Display]) -> String {
    let rows: Vec<String> = rows.iter().map(ToString::to_string).collect();
    format!("{header}\n{}", rows.join("\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_request_is_refused_without_a_panic_a_5xx_or_a_store_call() {
    let _turn = crate::turn().await;
    let (outcomes, panics) = hostile::run().await.unwrap();
    let table = table(HOSTILE_HEADER, &outcomes);
    assert_eq!(panics, 0, "{table}");
    assert!(outcomes.iter().all(|o| o.ok()), "{table}");
    assert!(
        outcomes.iter().all(|o| o.valid || !o.message.is_empty()),
        "every refusal says why:\n{table}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| o.valid).count(),
        15,
        "a control per API (check, json, gRPC, RLQS), a valid reservation, and the long \
         values that are decided, not refused: on /v1/check, /json, gRPC (2,000 bytes, \
         60 KiB), /v1/acquire, /v1/release, /v1/renew, an RLQS bucket; a flood of RLQS \
         buckets; a stream that never reads"
    );
    let flood = outcomes.iter().find(|o| o.class.contains("10,000 buckets"));
    assert_eq!(
        flood.map(|o| o.status.as_str()),
        Some("0 OK, 1000 answered"),
        "a flood of buckets is answered up to rlqs_max_buckets, each one:\n{table}"
    );
    println!("{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lie_of_the_store_is_answered_by_the_policy_without_a_panic() {
    let _turn = crate::turn().await;
    hostile::count_panics();
    let panics = hostile::panics_so_far();
    let outcomes = hostile::lies().await.unwrap();
    let table = table(hostile::LIES_HEADER, &outcomes);
    assert!(outcomes.iter().all(|o| o.ok()), "{table}");
    assert_eq!(hostile::panics_so_far(), panics, "{table}");
    println!("{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_closed_and_do_not_block_others() {
    let _turn = crate::turn().await;
    let timeout = Duration::from_millis(300);
    let (reports, answer, _) = hostile::slow_clients(200, timeout).await.unwrap();
    assert!(matches!(answer, Answer::Allowed { .. }), "{answer:?}");
    for r in reports {
        assert_eq!(r.closed, r.held, "{r}");
    }
}

#[test]
fn every_broken_policy_file_is_refused_quickly_without_a_panic() {
    let _turn = crate::turn_blocking();
    let outcomes = hostile::run_config().unwrap();
    let table: Vec<String> = outcomes.iter().map(ToString::to_string).collect();
    assert!(outcomes.iter().all(|o| o.ok()), "{}", table.join("\n"));
    // Every error names the file (and, where the YAML was readable, the line).
    for o in &outcomes {
        let e = o.error.as_deref().unwrap_or("");
        assert!(e.starts_with("p.yaml"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tls_clients_are_closed_counted_and_do_not_block_others() {
    let _turn = crate::turn().await;
    hostile::count_panics();
    let panics = hostile::panics_so_far();
    let timeout = Duration::from_millis(300);
    let reports = hostile::tls_clients(timeout).await.unwrap();
    let table = table(hostile::TLS_HEADER, &reports);
    assert_eq!(reports.len(), hostile::TlsCase::ALL.len());
    assert!(reports.iter().all(|r| r.ok(timeout)), "{table}");
    assert_eq!(hostile::panics_so_far(), panics, "{table}");
    println!("{table}");
}

/// Hostile HTTP/2 clients on the gRPC port, over h2c and over TLS; 20,000 idle
/// connections against a cap of 5,000 (this process is client and server: about
/// 10,000 file descriptors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_http2_clients_are_ended_and_others_are_served() {
    let _turn = crate::turn().await;
    hostile::count_panics();
    let panics = hostile::panics_so_far();
    let cases = hostile::H2Case::all(20_000);
    let mut reports = hostile::h2_clients(&cases, false).await.unwrap();
    reports.extend(hostile::h2_clients(&cases, true).await.unwrap());
    let table = table(hostile::H2_HEADER, &reports);
    assert!(reports.iter().all(|r| r.ok()), "{table}");
    assert_eq!(hostile::panics_so_far(), panics, "{table}");
    println!("{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_xds_pushes_are_refused_and_the_rules_in_force_kept() {
    let _turn = crate::turn().await;
    hostile::count_panics();
    let panics = hostile::panics_so_far();
    let outcomes = hostile::xds_pushes().await.unwrap();
    let table = table(hostile::XDS_HEADER, &outcomes);
    assert!(outcomes.iter().all(|o| o.ok()), "{table}");
    assert_eq!(hostile::panics_so_far(), panics, "{table}");
    println!("{table}");
}
