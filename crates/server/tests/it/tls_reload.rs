//! Serving TLS, its certificates reloaded without a restart: new handshakes take the
//! new pair while open connections keep theirs, a bad reload keeps the old pair and is
//! tried again until it loads, and a replaced client CA is used by new handshakes.

use crate::support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use spillway_testkit::metric;
use spillway_testkit::tls::{Leaf, Pair, Pki, certificate_der as der, client_config, replace};
use support::{Backing, Server};
use support::{TLS_POLICY as POLICY, eventually, grpc_over_tls, scrape, served, serving};

#[tokio::test]
async fn certificates_reload_when_their_files_change_and_a_bad_reload_keeps_the_old_pair() {
    let pki = Pki::new("serve-reload");
    let dir = pki.dir().to_path_buf();
    let (first, second) = (
        pki.issue("first", Leaf::Good),
        pki.issue("second", Leaf::Good),
    );
    let live = Pair {
        cert: dir.join("live").join("tls.crt"),
        key: dir.join("live").join("tls.key"),
    };
    std::fs::create_dir_all(dir.join("live")).unwrap();
    replace(&live.cert, &first.cert);
    replace(&live.key, &first.key);
    let s = Server::start_with(
        "tls-reload",
        &[("tls.yaml", POLICY)],
        Backing::Memory,
        serving(&live),
    )
    .await;
    let (grpc, ca) = (s.running.grpc_addr, pki.ca());
    assert_eq!(served(grpc, &ca).await, der(&first.cert));
    // An open connection, kept across the change.
    let channel =
        spillway_server::tls::grpc_channel(&grpc.to_string(), client_config(&ca, None, &[]))
            .await
            .unwrap();
    let mut open = RateLimitServiceClient::new(channel);

    replace(&live.key, &second.key);
    replace(&live.cert, &second.cert);
    assert!(
        eventually(|| async { served(grpc, &ca).await == der(&second.cert) }).await,
        "new handshakes present the new certificate"
    );
    let answer = open
        .should_rate_limit(support::request("tls", &[&[("user", "open")]]))
        .await;
    assert!(
        answer.is_ok(),
        "the open connection still answers: {answer:?}"
    );

    // A key that is not the certificate's: the reload fails, the pair in use stays.
    let failures = |text: &str| metric(text, "spillway_tls_reloads_total{result=\"error\"}");
    let http = s.running.http_addr;
    let before = failures(&scrape(http, &ca, None).await);
    replace(&live.key, &first.key);
    assert!(
        eventually(|| async { failures(&scrape(http, &ca, None).await) > before }).await,
        "the failed reload is counted"
    );
    assert_eq!(
        served(grpc, &ca).await,
        der(&second.cert),
        "the old pair stays"
    );
    // Mended: the next change loads.
    replace(&live.cert, &first.cert);
    assert!(eventually(|| async { served(grpc, &ca).await == der(&first.cert) }).await);
}

/// Issue #37 (9): a failed reload was never tried again, so a pair that became good
/// without another file event (a certificate not valid yet for a few seconds of clock
/// skew; here, files changed behind a symlink, outside the watched directory) waited
/// for the next event, possibly until the old certificate expired.
#[tokio::test]
async fn a_failed_reload_is_tried_again_until_it_loads() {
    let pki = Pki::new("serve-retry");
    let dir = pki.dir().to_path_buf();
    let (first, second) = (
        pki.issue("first", Leaf::Good),
        pki.issue("second", Leaf::Good),
    );
    // live/ (watched) holds symlinks into store/ (not watched).
    let (live, store) = (dir.join("live"), dir.join("store"));
    std::fs::create_dir_all(&live).unwrap();
    std::fs::create_dir_all(&store).unwrap();
    std::fs::copy(&first.cert, store.join("tls.crt")).unwrap();
    std::fs::copy(&first.key, store.join("tls.key")).unwrap();
    let served_pair = Pair {
        cert: live.join("tls.crt"),
        key: live.join("tls.key"),
    };
    for (link, target) in [
        (&served_pair.cert, "tls.crt"),
        (&served_pair.key, "tls.key"),
    ] {
        let _ = std::fs::remove_file(link);
        std::os::unix::fs::symlink(store.join(target), link).unwrap();
    }
    let s = Server::start_with(
        "tls-retry",
        &[("tls.yaml", POLICY)],
        Backing::Memory,
        serving(&served_pair),
    )
    .await;
    let (grpc, http, ca) = (s.running.grpc_addr, s.running.http_addr, pki.ca());
    assert_eq!(served(grpc, &ca).await, der(&first.cert));

    // A key that is not the certificate's, then an event in the watched directory: the
    // reload fails and the pair in use stays.
    let failures = |text: &str| metric(text, "spillway_tls_reloads_total{result=\"error\"}");
    let before = failures(&scrape(http, &ca, None).await);
    std::fs::copy(&second.key, store.join("tls.key")).unwrap();
    std::fs::write(live.join("nudge"), "").unwrap();
    assert!(
        eventually(|| async { failures(&scrape(http, &ca, None).await) > before }).await,
        "the failed reload is counted"
    );
    assert_eq!(served(grpc, &ca).await, der(&first.cert));

    // Mended behind the symlink: no event reaches the watcher, the retry loads it.
    std::fs::copy(&second.cert, store.join("tls.crt")).unwrap();
    assert!(
        eventually(|| async { served(grpc, &ca).await == der(&second.cert) }).await,
        "the retry takes up the mended pair without another file event"
    );
}

#[tokio::test]
async fn a_replaced_client_ca_is_used_by_new_handshakes() {
    let (old, new) = (Pki::new("ca-old"), Pki::new("ca-new"));
    let server_pair = old.issue("server", Leaf::Good);
    let (old_client, new_client) = (
        old.issue("client", Leaf::Good),
        new.issue("client", Leaf::Good),
    );
    let dir = old.dir().join("clients");
    std::fs::create_dir_all(&dir).unwrap();
    let client_ca = dir.join("ca.crt");
    replace(&client_ca, &old.ca());
    let s = Server::start_with("tls-ca-reload", &[("tls.yaml", POLICY)], Backing::Memory, {
        let base = serving(&server_pair);
        let client_ca = client_ca.clone();
        move |settings| {
            base(settings);
            settings.tls.client_ca = Some(client_ca);
        }
    })
    .await;
    let (grpc, ca) = (s.running.grpc_addr, old.ca());
    let ask = |client: &Pair| grpc_over_tls(grpc, client_config(&ca, Some(client), &[]));
    assert!(ask(&old_client).await.is_ok());
    assert!(ask(&new_client).await.is_err());
    // A bundle of both, as a rotation does: both are accepted.
    let bundle = dir.join("bundle.pem");
    let both = [
        std::fs::read_to_string(old.ca()).unwrap(),
        std::fs::read_to_string(new.ca()).unwrap(),
    ]
    .concat();
    std::fs::write(&bundle, both).unwrap();
    replace(&client_ca, &bundle);
    assert!(eventually(|| async { ask(&new_client).await.is_ok() }).await);
    assert!(ask(&old_client).await.is_ok());
}
