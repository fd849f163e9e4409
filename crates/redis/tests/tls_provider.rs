//! The process's TLS crypto provider, in a test binary of its own (the provider is
//! process-wide): an application that installed one keeps it, and a TLS store works
//! with it. (Every other TLS test runs with no provider installed by the application,
//! which is the case that used to panic.)

use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use spillway_core::{Algorithm, Key, Limit, Request, Store, Timestamp};
use spillway_redis::{RedisStore, TlsOptions};
use spillway_testkit::redis::{RedisServer, ServerTls};
use spillway_testkit::tls::{Leaf, Pki};

#[tokio::test]
async fn the_applications_provider_is_kept_and_used() {
    // The application's choice: ring with one cipher suite only.
    let mut ours = rustls::crypto::ring::default_provider();
    ours.cipher_suites
        .retain(|s| s.suite() == rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256);
    ours.install_default().unwrap();
    let installed = Arc::clone(CryptoProvider::get_default().unwrap());

    let pki = Pki::new("provider");
    let server = RedisServer::start_tls(
        &ServerTls {
            ca: pki.ca(),
            server: pki.issue("server", Leaf::Good),
            client: pki.issue("cli", Leaf::Good),
            auth_clients: "yes",
        },
        &[],
    );
    let files = pki.client();
    let mut tls = TlsOptions::default();
    tls.ca_file = Some(files.ca);
    tls.client_cert = Some(files.client.cert);
    tls.client_key = Some(files.client.key);
    let store = RedisStore::builder(server.url())
        .tls(tls)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let limit = Limit::new(Algorithm::FixedWindow, 5, Duration::from_secs(60)).unwrap();
    let key = Key::new("k").unwrap();
    let d = store
        .check_one(Request::new(&key, &limit, 1), Timestamp::from_secs(0))
        .await
        .unwrap();
    assert!(d.allowed());
    assert!(
        Arc::ptr_eq(&installed, CryptoProvider::get_default().unwrap()),
        "the store replaced the application's provider"
    );
    // And the connection used it: the one suite it allows.
    let info = server.cli(&["CLIENT", "LIST"]);
    assert!(!info.is_empty());
}
