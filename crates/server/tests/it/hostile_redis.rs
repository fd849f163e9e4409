//! A store that lies (issue #37, point 10): a peer speaking Redis's protocol answers
//! every decision call with a reply no Redis sends (`spillway_testkit::liar`). Each must
//! be a store error the failure policy answers (here `closed`: 503 / UNAVAILABLE),
//! never a panic; a well-formed lie (a reset of 292,000 years) is believed, and
//! answered without a panic or an overflow.

use crate::support;

use std::time::Duration;

use serde_json::json;
use spillway_policy::OnStoreError;
use spillway_testkit::liar::{Liar, Lie};
use support::{Backing, Server};

const POLICY: &str = "domain: lies\ndescriptors:\n  - key: user\n    limits: [{ algorithm: token_bucket, limit: 10, window: 1m }]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lie_of_the_store_is_a_store_error_and_no_panic() {
    let panics = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&panics);
    let report = std::panic::take_hook();
    // The hook is the process's, and the other tests of this binary run beside this
    // one: only a panic in the service's code counts, not a failed assertion of a test.
    std::panic::set_hook(Box::new(move |info| {
        if info
            .location()
            .is_some_and(|l| !l.file().contains("/tests/"))
        {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        report(info);
    }));
    for lie in Lie::ALL {
        let liar = Liar::start(lie).await;
        let s = Server::start_with(
            "lies",
            &[("l.yaml", POLICY)],
            Backing::Redis(liar.url()),
            |c| {
                c.store.on_error = OnStoreError::Closed;
                c.store.timeout = Duration::from_millis(200);
                c.store.breaker_failures = 1000;
            },
        )
        .await;
        let body = json!({ "domain": "lies", "descriptors": [{ "entries": [{ "key": "user", "value": "u" }] }] });
        for _ in 0..2 {
            let (status, _, answer) = s.check(body.clone()).await;
            let grpc = s
                .ask_status(support::request("lies", &[&[("user", "u")]]))
                .await;
            if lie.malformed() {
                assert_eq!(status, 503, "{lie:?}: {answer}");
                assert_eq!(answer["error"]["kind"], "store_unavailable", "{lie:?}");
                let e = grpc.unwrap_err();
                assert_eq!(e.code(), tonic::Code::Unavailable, "{lie:?}: {e:?}");
                assert!(!e.message().contains("victim"), "{lie:?}: {}", e.message());
            } else {
                assert!(matches!(status, 200 | 429), "{lie:?}: {answer}");
                assert!(grpc.is_ok(), "{lie:?}: {grpc:?}");
            }
        }
        s.running.stop().await;
    }
    assert_eq!(panics.load(std::sync::atomic::Ordering::SeqCst), 0);
}
