//! The configuration from each of its sources, merged.

use super::*;
use std::path::Path;

mod variables;

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The configuration `pairs` of the reference's variables make.
fn from_env(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Sources {
        env: vars(pairs),
        ..Sources::default()
    }
    .resolve()
    .map(|r| r.config)
}

#[test]
fn defaults_are_the_libraries_own() {
    let c = Config::default();
    assert_eq!(c.store.timeout, spillway_redis::DEFAULT_TIMEOUT);
    assert_eq!(
        c.store.breaker_failures,
        spillway_core::DEFAULT_FAILURES_TO_OPEN
    );
    assert_eq!(c.store.breaker_cooldown, spillway_core::DEFAULT_COOLDOWN);
    assert_eq!(c.store.trip(), spillway_core::Trip::default());
    assert_eq!(
        c.store.deny_cache_bytes,
        spillway_core::DEFAULT_DENY_CACHE_BYTES
    );
    assert_eq!(c.listen.http, "0.0.0.0:8080".parse().unwrap());
    assert_eq!(c.admin.addr, Some("127.0.0.1:6070".parse().unwrap()));
    assert!(c.xds().is_none() && c.rules.watch && c.admin.ui);
    // Every row's default and reference default is read by the row itself.
    Partial::defaults(Profile::Reference).build().unwrap();
}

#[test]
fn the_reference_environment_configures_the_service() {
    let c = from_env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.internal:6379"),
        ("REDIS_AUTH", "secret"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("PORT", "9080"),
        ("GRPC_PORT", "9081"),
        ("LOG_LEVEL", "DEBUG"),
        ("SHADOW_MODE", "true"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_RESET_HEADER", "X-Reset"),
        ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("RESPONSE_DYNAMIC_METADATA", "1"),
    ])
    .unwrap();
    assert_eq!(c.store.url, "redis://redis.internal:6379");
    assert_eq!(c.store.redis.password.as_ref().unwrap().expose(), "secret");
    assert!(!format!("{c:?}").contains("secret"), "no password in Debug");
    assert_eq!(c.rules.path, Path::new("/data/ratelimit/config"));
    assert_eq!(c.listen.http, "0.0.0.0:9080".parse().unwrap());
    assert_eq!(c.listen.grpc, "0.0.0.0:9081".parse().unwrap());
    assert_eq!(c.log.level, "debug");
    assert!(c.service.shadow_mode);
    let names = c.headers.reference.as_ref().unwrap();
    assert_eq!(names[0], "RateLimit-Limit");
    assert_eq!(names[2], "X-Reset");
    assert_eq!(c.store.deny_cache_bytes, 1 << 20);
    assert!(c.store.reference_local_cache);
    assert!(c.service.stop_increment_when_over_limit && c.service.dynamic_metadata);
    // The reference's 0 (its default: no cache) turns Spillway's off too.
    let c = from_env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "0")]).unwrap();
    assert_eq!(c.store.deny_cache_bytes, 0);
    assert!(!c.store.reference_local_cache);
    let e = from_env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "lots")]).unwrap_err();
    assert!(
        e.to_string().starts_with("LOCAL_CACHE_SIZE_IN_BYTES"),
        "{e}"
    );
    let e = from_env(&[("SHADOW_MODE", "maybe")]).unwrap_err();
    assert_eq!(e.to_string(), "SHADOW_MODE: `maybe` is not true or false");
    // IPv6 hosts, as Istio's sample sets them.
    let c = from_env(&[("HOST", "::"), ("GRPC_HOST", "::")]).unwrap();
    assert_eq!(c.listen.http, "[::]:8080".parse().unwrap());
    assert_eq!(c.listen.grpc, "[::]:8081".parse().unwrap());
}

/// Issue #36: the image's environment and Envoy Gateway's set no HOST; the check ports
/// must be reachable from outside the container's loopback all the same.
#[test]
fn without_host_variables_the_check_ports_listen_on_every_interface() {
    for env in [
        &[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ][..],
        &[("CONFIG_TYPE", "GRPC_XDS_SOTW")][..],
        &[][..],
    ] {
        let c = from_env(env).unwrap();
        assert!(c.listen.http.ip().is_unspecified(), "{env:?}: {c:?}");
        assert!(c.listen.grpc.ip().is_unspecified(), "{env:?}: {c:?}");
        assert!(c.admin.addr.unwrap().ip().is_loopback());
    }
}

#[test]
fn where_the_reference_is_spoken_its_defaults_apply() {
    let native = Sources::default().resolve().unwrap();
    assert_eq!(native.profile, Profile::Native);
    assert_eq!(native.config.rules.xds.backoff_initial.as_secs(), 1);
    assert_eq!(
        native.config.service.http_callers.overrides,
        crate::config::Overrides::Refuse
    );
    let as_ratelimit = Sources {
        called_ratelimit: true,
        ..Sources::default()
    }
    .resolve()
    .unwrap();
    assert_eq!(as_ratelimit.profile, Profile::Reference);
    assert_eq!(as_ratelimit.config.rules.xds.backoff_initial.as_secs(), 10);
    // The reference's /json takes a request's own limit.
    assert_eq!(
        as_ratelimit.config.service.http_callers.overrides,
        crate::config::Overrides::Allow
    );
    let with_a_variable = Sources {
        env: vars(&[("USE_STATSD", "false")]),
        ..Sources::default()
    }
    .resolve()
    .unwrap();
    assert_eq!(with_a_variable.profile, Profile::Reference);
    assert_eq!(
        with_a_variable
            .given
            .get("xds_backoff_initial")
            .unwrap()
            .origin,
        Origin::ReferenceDefault
    );
}

/// Issue #36: `GRPC_SERVER_TLS_CERT` without `GRPC_SERVER_USE_TLS=true` is ignored, as
/// the reference ignores it, and named as not honoured.
#[test]
fn the_tls_files_are_read_only_with_use_tls() {
    let files = [
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ("GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt"),
    ];
    let c = from_env(&files).unwrap();
    assert!(!c.tls_on().any(), "{:?}", c.tls);
    assert_eq!(c.tls_files().unwrap(), None);
    let named = not_honoured(&vars(&files));
    assert_eq!(named.len(), 3, "{named:?}");
    assert!(named[0].1.contains("GRPC_SERVER_USE_TLS=true"), "{named:?}");

    let mut on = files.to_vec();
    on.extend([
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_CLIENT_TLS_SAN", "envoy"),
    ]);
    let c = from_env(&on).unwrap();
    let tls = c.tls_on();
    assert!(tls.grpc && !tls.http && !tls.admin, "{tls:?}");
    let f = c.tls_files().unwrap().unwrap();
    assert_eq!(f.client_ca.unwrap(), Path::new("/certs/ca.crt"));
    assert_eq!(f.client_sans, ["envoy"]);
    assert!(not_honoured(&vars(&on)).is_empty());

    let e = from_env(&[("GRPC_SERVER_USE_TLS", "true")])
        .unwrap()
        .tls_files()
        .unwrap_err();
    assert!(e.to_string().contains("refusing to serve plaintext"), "{e}");
}

#[test]
fn tls_that_cannot_be_honoured_is_an_error_not_plaintext() {
    let mut c = Config::default();
    c.tls.cert = Some("a.crt".into());
    assert!(c.tls_files().unwrap_err().to_string().contains("tls_key"));
    c.tls.key = Some("a.key".into());
    c.tls.client_sans = vec!["x".into()];
    assert!(c.tls_files().unwrap_err().to_string().contains("client CA"));
    c.tls.client_sans.clear();
    let on = c.tls_on();
    assert!(
        on.grpc && on.http && !on.admin,
        "a certificate alone: both check ports"
    );
    c.tls.listeners = Some(TlsListeners::default());
    assert!(c.tls_files().unwrap_err().to_string().contains("none"));
    assert!(TlsListeners::parse("grpc,smtp").is_err());
    assert!(from_env(&[("DEBUG_PORT", "x")]).is_err());
    let c = from_env(&[("DEBUG_PORT", "7070")]).unwrap();
    assert_eq!(c.admin.addr, Some("127.0.0.1:7070".parse().unwrap()));
}

#[test]
fn envoy_gateways_variables_make_an_xds_source() {
    let c = from_env(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a, team = b"),
        ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:t1"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2s"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ])
    .unwrap();
    let x = c.xds().expect("rules over xDS");
    assert_eq!(x.server.as_deref(), Some("envoy-gateway:18001"));
    assert_eq!(x.node_id, "envoy-ratelimit");
    assert_eq!(
        x.node_metadata,
        [("zone".into(), "a".into()), ("team".into(), "b".into())]
    );
    assert_eq!(x.headers, [("x-token".into(), "t1".into())]);
    assert_eq!(x.backoff_initial.as_secs(), 2);
    let tls = x.tls.as_ref().unwrap();
    assert_eq!(tls.server_ca.as_deref(), Some(Path::new("/certs/ca.crt")));
    assert!(x.ready_without_rules);

    assert!(
        from_env(&[("CONFIG_TYPE", "FILE")])
            .unwrap()
            .xds()
            .is_none()
    );
    let e = from_env(&[("CONFIG_TYPE", "CONSUL")]).unwrap_err();
    assert!(e.to_string().contains("CONFIG_TYPE"), "{e}");
    let e = from_env(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone"),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("not key=value"), "{e}");
}

#[test]
fn the_settings_file_then_the_variables_then_the_flags() {
    let dir = std::env::temp_dir().join(format!("spillway-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("spillway.yaml");
    std::fs::write(
        &file,
        "config: rules\nstore_timeout: 25ms\nshadow_mode: true\nhttp_addr: 127.0.0.1:1\n\
         tls_client_san: [a, b]\nbreaker_failures: 3\n",
    )
    .unwrap();
    let mut flags = Partial::default();
    flags
        .set(
            "http_addr",
            "127.0.0.1:3",
            Origin::Flag("--http-addr".into()),
        )
        .unwrap();
    let r = Sources {
        file: Some(file.clone()),
        env: vars(&[("PORT", "2"), ("HOST", "127.0.0.1")]),
        flags,
        called_ratelimit: false,
    }
    .resolve()
    .unwrap();
    let c = &r.config;
    assert_eq!(c.rules.path, dir.join("rules"), "relative to the file");
    assert_eq!(c.store.timeout.as_millis(), 25);
    assert!(c.service.shadow_mode);
    assert_eq!(c.tls.client_sans, ["a", "b"]);
    assert_eq!(c.store.breaker_failures, 3);
    assert_eq!(c.listen.http, "127.0.0.1:3".parse().unwrap(), "flags win");
    assert_eq!(
        r.given.get("http_addr").unwrap().origin,
        Origin::Flag("--http-addr".into())
    );
    assert_eq!(
        r.given.get("config").unwrap().origin,
        Origin::File(file.clone())
    );
    assert_eq!(
        r.given.get("drain_timeout").unwrap().origin,
        Origin::Default
    );

    std::fs::write(&file, "store_timeout: soon\n").unwrap();
    let e = Partial::from_file(&file)
        .unwrap()
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("store_timeout: `soon` is not a duration"), "{e}");
    for (bad, says) in [
        ("breaker_ratio: 0", "above 0"),
        ("breaker_ratio: 1.5", "between 0 and 1"),
        ("breaker_window: 0s", "the window must be above 0"),
    ] {
        std::fs::write(&file, format!("{bad}\n")).unwrap();
        let e = Partial::from_file(&file).unwrap().build().unwrap_err();
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
    std::fs::write(&file, "stroe: memory\n").unwrap();
    let e = Partial::from_file(&file).unwrap_err().to_string();
    assert!(
        e.contains("unknown setting `stroe` (did you mean `store`?)"),
        "{e}"
    );
    std::fs::write(&file, "breaker_failure: 3\n").unwrap();
    let e = Partial::from_file(&file).unwrap_err().to_string();
    assert!(e.contains("did you mean `breaker_failures`?"), "{e}");
}

#[test]
fn worker_threads_are_tokios_choice_unless_set_from_1_to_1024() {
    let row = setting("worker_threads").unwrap();
    let mut c = Config::default();
    assert_eq!(c.service.worker_threads, None);
    (row.set)(&mut c, "1").unwrap();
    assert_eq!(c.service.worker_threads, Some(1));
    (row.set)(&mut c, "").unwrap();
    assert_eq!(c.service.worker_threads, None);
    for bad in ["0", "1025", "-1", "two"] {
        let e = (row.set)(&mut c, bad).unwrap_err();
        assert!(e.contains(bad), "{bad}: {e}");
    }
}
