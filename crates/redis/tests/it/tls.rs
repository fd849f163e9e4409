//! TLS and credentials against real servers of each test's own, with certificates the
//! test makes: what works (a private CA, a client certificate, hostname checks relaxed,
//! an ACL user), and every way it can be wrong, each with the error a person needs —
//! never a panic — and whether waiting could help.

use std::time::Duration;

use spillway_core::{Algorithm, Key, Limit, Request, Store, Timestamp};
use spillway_redis::{Access, Error, Password, RedisStore, TlsOptions, Verify};
use spillway_testkit::redis::{RedisServer, ServerTls};
use spillway_testkit::tls::{Leaf, Pki};

/// A TLS server with a `leaf` certificate from `pki`, asking for client certificates.
fn tls_server(pki: &Pki, leaf: Leaf) -> RedisServer {
    RedisServer::start_tls(
        &ServerTls {
            ca: pki.ca(),
            server: pki.issue("server", leaf),
            client: pki.issue("cli", Leaf::Good),
            auth_clients: "yes",
        },
        &[],
    )
}

/// Trusting `pki`'s CA and presenting a good client certificate from it.
fn trusting(pki: &Pki) -> TlsOptions {
    let files = pki.client();
    let mut tls = TlsOptions::default();
    tls.ca_file = Some(files.ca);
    tls.client_cert = Some(files.client.cert);
    tls.client_key = Some(files.client.key);
    tls
}

async fn connect(url: &str, access: Access) -> Result<RedisStore, Error> {
    RedisStore::builder(url)
        .access(access)
        .timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_millis(1500))
        .build()
        .await
}

async fn connect_tls(url: &str, tls: TlsOptions) -> Result<RedisStore, Error> {
    let mut access = Access::default();
    access.tls = tls;
    connect(url, access).await
}

/// One decision, charged, on a fresh key.
async fn decide(store: &RedisStore) -> Result<bool, spillway_core::Error> {
    let limit = Limit::new(Algorithm::Gcra, 10, Duration::from_secs(60)).unwrap();
    let key = Key::new("tls-test").unwrap();
    let d = store
        .check_one(Request::new(&key, &limit, 1), Timestamp::from_secs(0))
        .await?;
    Ok(d.allowed())
}

/// The error of a build that must fail, with its message and whether it is transient.
async fn refused(url: &str, access: Access) -> (String, bool) {
    match connect(url, access).await {
        Ok(_) => panic!("{url}: connected, but should not have"),
        Err(e) => (e.to_string(), e.is_transient()),
    }
}

async fn refused_tls(url: &str, tls: TlsOptions) -> (String, bool) {
    let mut access = Access::default();
    access.tls = tls;
    refused(url, access).await
}

#[tokio::test]
async fn a_private_ca_and_a_client_certificate_decide() {
    let pki = Pki::new("good");
    let server = tls_server(&pki, Leaf::Good);
    let store = connect_tls(&server.url(), trusting(&pki)).await.unwrap();
    assert!(decide(&store).await.unwrap());
    // Every key has a TTL, over TLS as on plaintext.
    let keys = server.cli(&["--scan"]);
    assert!(!keys.trim().is_empty());
    for key in keys.lines() {
        let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        assert!(ttl > 0, "{key}: PTTL {ttl}");
    }
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_and_named() {
    let (pki, other) = (Pki::new("ours"), Pki::new("other"));
    let server = tls_server(&other, Leaf::Good);
    let (e, transient) = refused_tls(&server.url(), trusting(&pki)).await;
    assert!(
        e.contains("UnknownIssuer") && e.contains("not signed by a CA this store trusts"),
        "{e}"
    );
    assert!(!transient, "a wrong CA does not pass by itself");
    // The system's roots do not hold a test CA either.
    let (e, _) = refused_tls(&server.url(), TlsOptions::default()).await;
    assert!(e.contains("UnknownIssuer"), "{e}");
}

#[tokio::test]
async fn expired_and_not_yet_valid_certificates_are_refused_and_named() {
    let pki = Pki::new("dates");
    let server = tls_server(&pki, Leaf::Expired);
    let (e, transient) = refused_tls(&server.url(), trusting(&pki)).await;
    assert!(
        e.contains("certificate expired") && e.contains("has expired"),
        "{e}"
    );
    assert!(!transient);
    // Verifying the chain only still checks the dates.
    let mut chain = trusting(&pki);
    chain.verify = Verify::ChainOnly;
    let (e, _) = refused_tls(&server.url(), chain).await;
    assert!(e.contains("certificate expired"), "{e}");

    let server = tls_server(&pki, Leaf::NotYetValid);
    let (e, _) = refused_tls(&server.url(), trusting(&pki)).await;
    assert!(e.contains("not valid yet"), "{e}");
}

#[tokio::test]
async fn a_name_mismatch_is_refused_unless_only_the_chain_is_verified() {
    let pki = Pki::new("name");
    let server = tls_server(&pki, Leaf::OtherName);
    let (e, transient) = refused_tls(&server.url(), trusting(&pki)).await;
    assert!(
        e.contains("not valid for name") && e.contains("does not name the host"),
        "{e}"
    );
    assert!(!transient);

    let mut chain = trusting(&pki);
    chain.verify = Verify::ChainOnly;
    let store = connect_tls(&server.url(), chain).await.unwrap();
    assert!(decide(&store).await.unwrap());

    // Verifying nothing connects to a server of any CA (and is for tests only).
    let mut none = TlsOptions::default();
    none.verify = Verify::Insecure;
    none.client_cert = trusting(&pki).client_cert;
    none.client_key = trusting(&pki).client_key;
    let store = connect_tls(&server.url(), none).await.unwrap();
    assert!(decide(&store).await.unwrap());
}

#[tokio::test]
async fn client_certificates_missing_or_foreign_are_refused_by_redis() {
    let (pki, other) = (Pki::new("mtls"), Pki::new("mtls-other"));
    let server = tls_server(&pki, Leaf::Good);
    let mut no_cert = TlsOptions::default();
    no_cert.ca_file = Some(pki.ca());
    let (e, transient) = refused_tls(&server.url(), no_cert).await;
    assert!(
        e.contains("CertificateRequired") && e.contains("client certificate"),
        "{e}"
    );
    assert!(!transient);

    // A client certificate from a CA Redis does not trust.
    let mut foreign = trusting(&other);
    foreign.ca_file = Some(pki.ca());
    let (e, _) = refused_tls(&server.url(), foreign).await;
    assert!(e.contains("Redis refused the client certificate"), "{e}");
}

#[tokio::test]
async fn plaintext_and_tls_mixed_up_are_named() {
    let pki = Pki::new("mixup");
    let tls = tls_server(&pki, Leaf::Good);
    let plain = RedisServer::start();

    let plaintext_to_tls = tls.url().replace("rediss://", "redis://");
    let (e, transient) = refused(&plaintext_to_tls, Access::default()).await;
    assert!(e.contains("use rediss://"), "{e}");
    assert!(!transient);

    let tls_to_plaintext = plain.url().replace("redis://", "rediss://");
    let (e, _) = refused_tls(&tls_to_plaintext, trusting(&pki)).await;
    assert!(e.contains("use redis://"), "{e}");

    // TLS settings on a plaintext URL are refused, never dropped.
    let (e, transient) = refused_tls(&plain.url(), trusting(&pki)).await;
    assert!(e.contains("the store URL is not TLS"), "{e}");
    assert!(!transient);
}

#[tokio::test]
async fn bad_files_fail_before_any_connection() {
    let pki = Pki::new("files");
    let server = tls_server(&pki, Leaf::Good);
    let junk = pki.dir().join("junk.pem");
    std::fs::write(&junk, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
    let other = pki.issue("other", Leaf::Good);

    type Change<'a> = Box<dyn Fn(&mut TlsOptions) + 'a>;
    let cases: Vec<(&str, Change<'_>)> = vec![
        (
            "cannot read CA file",
            Box::new(|t| t.ca_file = Some("/nonexistent/ca.crt".into())),
        ),
        (
            "is not valid PEM",
            Box::new(|t| t.ca_file = Some(junk.clone())),
        ),
        (
            "cannot read client key",
            Box::new(|t| t.client_key = Some("/nonexistent/k".into())),
        ),
        (
            "holds no usable private key",
            Box::new(|t| t.client_key = t.client_cert.clone()),
        ),
        (
            "cannot be used together",
            Box::new(|t| t.client_key = Some(other.key.clone())),
        ),
        (
            "a CA file and insecure mode exclude each other",
            Box::new(|t| t.verify = Verify::Insecure),
        ),
    ];
    for (expected, change) in cases {
        let mut tls = trusting(&pki);
        change(&mut tls);
        let (e, transient) = refused_tls(&server.url(), tls).await;
        assert!(e.contains(expected), "expected `{expected}` in: {e}");
        assert!(!transient, "{e}");
    }
}

#[tokio::test]
async fn acl_users_passwords_and_what_they_may_not_run() {
    let pki = Pki::new("acl");
    let server = tls_server(&pki, Leaf::Good);
    let secret = "s3cret-acl-password";
    let acl = |rules: &str| {
        let mut args = vec!["ACL", "SETUSER", "limiter", "reset", "on"];
        let pass = format!(">{secret}");
        args.push(&pass);
        args.extend(rules.split(' '));
        assert_eq!(server.cli(&args).trim(), "OK");
    };
    let as_limiter = |password: &str| {
        let mut access = Access::default();
        access.tls = trusting(&pki);
        access.username = Some("limiter".into());
        access.password = Some(Password::new(password));
        access
    };

    acl("~* +@all");
    let store = connect(&server.url(), as_limiter(secret)).await.unwrap();
    assert!(decide(&store).await.unwrap());
    // The password in the URL works the same, and never shows in an error.
    let in_url = server
        .url()
        .replace("rediss://", &format!("rediss://limiter:{secret}@"));
    let mut tls_only = Access::default();
    tls_only.tls = trusting(&pki);
    connect(&in_url, tls_only.clone()).await.unwrap();

    let (e, transient) = refused(&server.url(), as_limiter("wrong")).await;
    assert!(
        e.contains("authentication failed") && e.contains("password is wrong"),
        "{e}"
    );
    assert!(!transient, "a wrong password does not pass by itself");
    let wrong_in_url = in_url.replace(secret, "not-the-password");
    let (e, _) = refused(&wrong_in_url, tls_only).await;
    assert!(
        e.contains("limiter:***@") && !e.contains("not-the-password"),
        "{e}"
    );

    acl("~* +@all -fcall");
    let (e, transient) = refused(&server.url(), as_limiter(secret)).await;
    assert!(
        e.contains("cannot run Spillway's decision script") && e.contains("fcall"),
        "{e}"
    );
    assert!(!transient);

    // A user that may run scripts but not load functions decides with EVALSHA, and
    // the store says why.
    acl("~* +@all -function");
    let store = connect(&server.url(), as_limiter(secret)).await.unwrap();
    let spillway_redis::Calls::Script { why } = store.calls() else {
        panic!("{:?}", store.calls())
    };
    assert!(why.contains("FUNCTION LOAD was refused"), "{why}");
    assert!(decide(&store).await.unwrap());
    acl("~* +@all -function -evalsha");
    let (e, _) = refused(&server.url(), as_limiter(secret)).await;
    assert!(e.contains("evalsha"), "{e}");

    acl("~* +@all -time");
    let (e, _) = refused(&server.url(), as_limiter(secret)).await;
    assert!(
        e.contains("can't run this command") && e.contains("TIME"),
        "{e}"
    );

    // A store that was fine and then loses its rights fails its decisions, and decides
    // again once they are given back: nothing to restart.
    acl("~* +@all");
    let store = connect(&server.url(), as_limiter(secret)).await.unwrap();
    acl("~* +@all -fcall");
    let e = decide(&store).await.unwrap_err();
    assert!(e.to_string().contains("fcall"), "{e}");
    acl("~* +@all");
    assert!(decide(&store).await.unwrap());
}

#[tokio::test]
async fn a_server_certificate_replaced_while_running_needs_no_restart() {
    let pki = Pki::new("rotate");
    let server = tls_server(&pki, Leaf::Good);
    let store = connect_tls(&server.url(), trusting(&pki)).await.unwrap();
    assert!(decide(&store).await.unwrap());

    // A new pair from the same CA, loaded by Redis; every connection dropped.
    let fresh = pki.issue("server-2", Leaf::Good);
    let (cert, key) = (
        fresh.cert.display().to_string(),
        fresh.key.display().to_string(),
    );
    assert_eq!(
        server
            .cli(&[
                "CONFIG",
                "SET",
                "tls-cert-file",
                &cert,
                "tls-key-file",
                &key
            ])
            .trim(),
        "OK"
    );
    server.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    // The store reconnects by itself, with a new handshake against the new certificate.
    let mut decided = false;
    for _ in 0..100 {
        if decide(&store).await.is_ok() {
            decided = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(decided, "decisions resume on the new certificate");
}
