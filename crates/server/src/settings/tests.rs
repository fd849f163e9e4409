//! The settings from each of their places, and the reference's environment.

use super::*;
use std::collections::HashMap;

/// A variable lookup over `pairs`, as the settings read the environment (the
/// tests of every part of the settings use it).
pub(crate) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn the_reference_environment_configures_the_service() {
    let mut s = Settings::default();
    s.apply_reference_env(env(&[
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
    ]))
    .unwrap();
    assert_eq!(s.store, "redis://redis.internal:6379");
    assert_eq!(s.redis.password.as_ref().unwrap().expose(), "secret");
    assert!(!format!("{s:?}").contains("secret"), "no password in Debug");
    assert_eq!(s.config, Path::new("/data/ratelimit/config"));
    assert_eq!(s.http_addr, "0.0.0.0:9080".parse().unwrap());
    assert_eq!(s.grpc_addr, "0.0.0.0:9081".parse().unwrap());
    assert_eq!(s.log_level, "debug");
    assert!(s.shadow_mode);
    assert_eq!(s.reference_headers.as_ref().unwrap()[2], "X-Reset");
    assert_eq!(s.deny_cache_bytes, 1 << 20);
    assert!(s.reference_local_cache);
    assert!(!s.stop_increment_when_over_limit && !s.dynamic_metadata);
    s.apply_reference_env(env(&[
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("RESPONSE_DYNAMIC_METADATA", "1"),
    ]))
    .unwrap();
    assert!(s.stop_increment_when_over_limit && s.dynamic_metadata);
    // The reference's 0 (its default: no cache) turns Spillway's off too.
    let mut s = Settings::default();
    s.apply_reference_env(env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "0")]))
        .unwrap();
    assert_eq!(s.deny_cache_bytes, 0);
    assert!(!s.reference_local_cache);
    assert!(
        s.apply_reference_env(env(&[("LOCAL_CACHE_SIZE_IN_BYTES", "lots")]))
            .is_err()
    );
}

#[test]
fn the_reference_variables_not_honoured_are_named() {
    let set = [
        ("REDIS_POOL_SIZE", "10"),
        ("STATSD_HOST", "localhost"),
        ("REDIS_URL", "r:6379"),
        ("PORT", "8080"),
        ("MEMCACHE_HOST_PORT", "m:11211"),
        ("PATH", "/bin"),
        ("PROTO", "TCP"),
        ("RUNTIME_IGNOREDOTFILES", "false"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
    ]
    .map(|(n, v)| (n.to_string(), v.to_string()));
    let names: Vec<String> = not_honoured(set).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "MEMCACHE_HOST_PORT",
            "REDIS_POOL_SIZE",
            "RUNTIME_IGNOREDOTFILES",
            "STATSD_HOST"
        ]
    );
    let mut s = Settings::default();
    s.apply_reference_env(env(&[("CACHE_KEY_PREFIX", "east_")]))
        .unwrap();
    assert_eq!(s.key_prefix, "east_");
}

#[test]
fn a_settings_file_sets_what_it_names_and_refuses_unknown_keys() {
    let dir = std::env::temp_dir().join(format!("spillway-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("spillway.yaml");
    std::fs::write(
        &file,
        "config: policies\nstore: redis://r:6379\nhttp_addr: :9000\nstore_timeout: 25ms\non_store_error: local\nheaders: legacy\nlog_format: json\n",
    )
    .unwrap();
    let mut s = Settings::default();
    s.apply_file(&file).unwrap();
    assert_eq!(
        s.config,
        dir.join("policies"),
        "relative to the settings file"
    );
    assert_eq!(s.store, "redis://r:6379");
    assert_eq!(s.http_addr, "0.0.0.0:9000".parse().unwrap());
    assert_eq!(s.store_timeout, Duration::from_millis(25));
    assert_eq!(s.on_store_error, OnStoreError::Local);
    assert_eq!(s.headers, HeaderStyle::Legacy);
    assert!(s.log_json);

    std::fs::write(&file, "store_timeout: soon\n").unwrap();
    let e = Settings::default()
        .apply_file(&file)
        .unwrap_err()
        .to_string();
    assert!(e.contains("store_timeout: `soon` is not a duration"), "{e}");
    std::fs::write(&file, "stroe: memory\n").unwrap();
    let e = Settings::default()
        .apply_file(&file)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `stroe`"), "{e}");
}

#[test]
fn redis_types_become_urls() {
    let url = |pairs: &[(&str, &str)]| {
        let mut s = Settings::default();
        s.apply_reference_env(env(pairs)).map(|()| s.store)
    };
    assert_eq!(
        url(&[("REDIS_URL", "/var/run/redis.sock")]).unwrap(),
        "unix:///var/run/redis.sock"
    );
    assert_eq!(
        url(&[
            ("REDIS_TYPE", "CLUSTER"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "a:1,b:2")
        ])
        .unwrap(),
        "redis+cluster://a:1,b:2"
    );
    assert_eq!(
        url(&[
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "mymaster,s1:26379,s2:26379")
        ])
        .unwrap(),
        "redis+sentinel://s1:26379,s2:26379/mymaster"
    );
    assert_eq!(
        url(&[("REDIS_URL", "redis://x:1/2")]).unwrap(),
        "redis://x:1/2"
    );
    assert!(
        url(&[("REDIS_TYPE", "memcache"), ("REDIS_URL", "a:1")])
            .unwrap_err()
            .to_string()
            .contains("REDIS_TYPE")
    );
    assert!(
        url(&[("PORT", "http")])
            .unwrap_err()
            .to_string()
            .starts_with("PORT")
    );
}
