//! The reference's variables: Redis types, those not honoured, secrets hidden, issue 48's deployment.

use super::*;

#[test]
fn redis_types_become_urls() {
    let url = |pairs: &[(&str, &str)]| from_env(pairs).map(|c| c.store.url);
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
    let e = url(&[("REDIS_TYPE", "memcache"), ("REDIS_URL", "a:1")]).unwrap_err();
    assert!(e.to_string().contains("REDIS_TYPE"), "{e}");
    let e = url(&[("PORT", "http")]).unwrap_err();
    assert!(e.to_string().starts_with("PORT"), "{e}");
}

#[test]
fn variables_not_honoured_are_named_with_why() {
    let named = not_honoured(&vars(&[
        ("REDIS_POOL_SIZE", "10"),
        ("MEMCACHE_HOST_PORT", "x:1"),
        ("USE_STATSD", "false"),
        ("BACKEND_TYPE", "redis"),
        ("REDIS_URL", "x:1"),
    ]));
    let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["MEMCACHE_HOST_PORT", "REDIS_POOL_SIZE"]);
}

#[test]
fn debug_shows_no_secret() {
    let mut c = Config::default();
    c.store.url = "unix:///run/redis.sock?pass=hunter2".into();
    c.rules.xds.headers = vec![("authorization".into(), "Bearer hunter2".into())];
    c.store.url.push_str("&db=1");
    let shown = format!("{c:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("pass=***"), "{shown}");
    assert!(shown.contains("authorization"), "{shown}");
    c.store.url = "redis://u:hunter2@h:1".into();
    assert!(!format!("{c:?}").contains("hunter2"));
}

/// Issue #48: the reference's per-second Redis, statsd, connection age and Unix socket
/// variables become settings; the per-second ones only with `REDIS_PERSECOND=true`.
#[test]
fn the_reference_deployment_variables_of_issue_48() {
    let c = from_env(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.internal:6379"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_TYPE", "cluster"),
        ("REDIS_PERSECOND_URL", "a:7000,b:7000"),
        ("REDIS_PERSECOND_AUTH", "ps-user:ps-pass"),
        ("REDIS_PERSECOND_TIMEOUT", "50ms"),
        ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
        ("STATSD_HOST", "agent"),
        ("STATSD_PORT", "9125"),
        ("EXTRA_TAGS", "cluster:eu,team:edge"),
        ("STATS_FLUSH_INTERVAL", "2s"),
        ("GRPC_MAX_CONNECTION_AGE", "1h"),
        ("GRPC_UDS", "/run/ratelimit.sock"),
    ])
    .unwrap();
    let p = c.store.per_second.as_ref().unwrap();
    assert_eq!(p.url, "redis+cluster://a:7000,b:7000");
    assert_eq!(p.redis.username.as_deref(), Some("ps-user"));
    assert_eq!(p.timeout, Some(Duration::from_millis(50)));
    assert_eq!(c.store.url, "redis://redis.internal:6379");
    assert!(c.store.health_follows_store);
    // USE_STATSD's default (true) with the reference's protocol (tcp, as gostats).
    assert_eq!(c.stats.statsd.as_deref(), Some("agent:9125"));
    assert!(c.stats.statsd_tcp && !c.stats.dogstatsd && c.stats.reference_metrics);
    assert_eq!(
        c.stats.tags,
        [
            ("cluster".into(), "eu".into()),
            ("team".into(), "edge".into())
        ]
    );
    assert_eq!(c.stats.flush_interval, Duration::from_secs(2));
    assert_eq!(c.listen.max_connection_age, Duration::from_secs(3600));
    assert_eq!(c.listen.max_connection_age_grace, Duration::from_secs(3600));
    assert_eq!(
        c.listen.grpc_uds.as_deref(),
        Some(Path::new("/run/ratelimit.sock"))
    );

    // Any reference variable brings the reference's defaults: statsd to
    // localhost:8125 over TCP, connections rotated daily.
    let c = from_env(&[("REDIS_SOCKET_TYPE", "tcp")]).unwrap();
    assert_eq!(c.stats.statsd.as_deref(), Some("localhost:8125"));
    assert_eq!(c.listen.max_connection_age, Duration::from_secs(24 * 3600));
    assert!(c.store.per_second.is_none());
    // USE_STATSD=false, DISABLE_STATS and USE_DOG_STATSD as the reference reads them.
    let c = from_env(&[("USE_STATSD", "false")]).unwrap();
    assert!(c.stats.statsd.is_none() && c.stats.reference_metrics);
    let c = from_env(&[("DISABLE_STATS", "true"), ("USE_PROMETHEUS", "true")]).unwrap();
    assert!(c.stats.statsd.is_none() && !c.stats.reference_metrics);
    let c = from_env(&[
        ("USE_STATSD", "false"),
        ("USE_DOG_STATSD", "true"),
        ("USE_DOG_STATSD_MOGRIFIERS", "RL"),
        ("DOG_STATSD_MOGRIFIER_RL_PATTERN", r"^ratelimit\.(.*)$"),
        ("DOG_STATSD_MOGRIFIER_RL_NAME", "rl.$1"),
        ("DOG_STATSD_MOGRIFIER_RL_TAGS", "kind:$1"),
    ])
    .unwrap();
    assert!(c.stats.dogstatsd && !c.stats.statsd_tcp);
    assert_eq!(c.stats.mogrifiers.len(), 1);
    assert_eq!(c.stats.mogrifiers[0].tags, [("kind".into(), "$1".into())]);
    // A mogrifier without its pattern stops the start, naming the variable.
    let e = from_env(&[
        ("USE_DOG_STATSD", "true"),
        ("USE_DOG_STATSD_MOGRIFIERS", "X"),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("DOG_STATSD_MOGRIFIER_X_PATTERN"), "{e}");
    // The per-second variables without REDIS_PERSECOND=true are named, not used.
    let vars = vars(&[("REDIS_PERSECOND_URL", "a:1")]);
    assert!(
        not_honoured(&vars)
            .iter()
            .any(|(n, _)| n == "REDIS_PERSECOND_URL")
    );
    let e = from_env(&[("REDIS_PERSECOND", "true")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("REDIS_PERSECOND_URL"), "{e}");
}

/// The store's window: the reference's `REDIS_PIPELINE_WINDOW` sets it (in Go's units,
/// `150us`), unset it is zero, and past a millisecond it stops the start, saying why.
#[test]
fn the_store_window_and_the_reference_pipeline_window() {
    assert_eq!(from_env(&[]).unwrap().store.window, Duration::ZERO);
    let c = from_env(&[("REDIS_PIPELINE_WINDOW", "150us")]).unwrap();
    assert_eq!(c.store.window, Duration::from_micros(150));
    assert!(
        !not_honoured(&vars(&[("REDIS_PIPELINE_WINDOW", "150us")]))
            .iter()
            .any(|(n, _)| n == "REDIS_PIPELINE_WINDOW")
    );
    let with_flag = |value: &str| {
        let mut flags = Partial::default();
        flags.set("store_window", value, Origin::Flag("--store-window".into()))?;
        Sources {
            flags,
            ..Sources::default()
        }
        .resolve()
        .map(|r| r.config)
    };
    let c = with_flag("200us").unwrap();
    assert_eq!(c.store.window, Duration::from_micros(200));
    let e = with_flag("2ms").unwrap_err().to_string();
    assert!(e.contains("at most 1ms"), "{e}");
    // The per-second store takes the main store's.
    let c = from_env(&[
        ("REDIS_PIPELINE_WINDOW", "100us"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_URL", "a:1"),
    ])
    .unwrap();
    assert_eq!(
        c.store.per_second().unwrap().window,
        Duration::from_micros(100)
    );
}
