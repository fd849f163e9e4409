//! docs/reference/settings.md and docs/reference/metrics.md are made from the code
//! (`spillway config --reference settings|metrics`); these tests fail when a setting,
//! a reference variable or a metric exists in the code and not on its page, or the
//! reverse, and when a metric is recorded that the metrics table does not list.

use std::path::{Path, PathBuf};

use spillway_server::config::{
    NOT_HONOURED, REFERENCE, REFERENCE_VARIABLES, SETTINGS, migration, migration_table,
    not_honoured,
};
use spillway_server::metrics::METRICS;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn page(name: &str) -> String {
    std::fs::read_to_string(root().join("docs/reference").join(name))
        .unwrap_or_else(|e| panic!("docs/reference/{name}: {e}"))
}

/// `docs/reference/{name}` is what the code makes of it (`spillway config --reference
/// {stem}`), or the first line where they differ.
fn assert_generated(name: &str, text: &str, made: &str) {
    let stem = name.trim_end_matches(".md");
    assert!(
        text == made,
        "docs/reference/{name} differs from the code at {}\n(regenerate: spillway config \
         --reference {stem} > docs/reference/{name})",
        first_difference(text, made)
    );
}

/// The first line where `page` and `made` differ, to say what to fix.
fn first_difference(page: &str, made: &str) -> String {
    let (mut a, mut b) = (page.lines(), made.lines());
    for n in 1.. {
        match (a.next(), b.next()) {
            (None, None) => break,
            (x, y) if x != y => {
                return format!("line {n}:\n  page: {x:?}\n  code: {y:?}");
            }
            _ => {}
        }
    }
    String::new()
}

#[test]
fn every_setting_is_on_the_settings_page_and_nothing_else() {
    let text = page("settings.md");
    for s in SETTINGS {
        assert!(
            text.contains(&format!("| `{}` |", s.name)),
            "the setting `{}` is missing from docs/reference/settings.md",
            s.name
        );
    }
    for row in text.lines().filter(|l| l.starts_with("| `")) {
        let name = row.split('`').nth(1).unwrap_or("");
        let known = SETTINGS.iter().any(|s| s.name == name)
            || REFERENCE.iter().any(|r| r.variables.contains(&name))
            || NOT_HONOURED.iter().any(|(n, _)| *n == name);
        assert!(
            known,
            "docs/reference/settings.md lists `{name}`, which the code does not have"
        );
    }
    assert_generated(
        "settings.md",
        &text,
        &spillway_server::config::reference_page(),
    );
}

/// Every variable of the reference's `src/settings/settings.go` (and the ones its README
/// adds) is honoured or named as not honoured, with why.
#[test]
fn every_reference_variable_is_honoured_or_said_not_to_be() {
    const SETTINGS_GO: &[&str] = &[
        "PROTO",
        "HOST",
        "PORT",
        "DEBUG_HOST",
        "DEBUG_PORT",
        "GRPC_UDS",
        "GRPC_HOST",
        "GRPC_PORT",
        "GRPC_MAX_CONNECTION_AGE",
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "GRPC_SERVER_USE_TLS",
        "GRPC_SERVER_TLS_CERT",
        "GRPC_SERVER_TLS_KEY",
        "GRPC_CLIENT_TLS_CACERT",
        "GRPC_CLIENT_TLS_SAN",
        "LOG_LEVEL",
        "LOG_FORMAT",
        "CONFIG_TYPE",
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "CONFIG_GRPC_XDS_NODE_ID",
        "CONFIG_GRPC_XDS_NODE_METADATA",
        "CONFIG_GRPC_XDS_SERVER_URL",
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        "CONFIG_GRPC_XDS_SERVER_USE_TLS",
        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
        "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "XDS_CLIENT_BACKOFF_JITTER",
        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
        "USE_DOG_STATSD",
        "USE_DOG_STATSD_MOGRIFIERS",
        "USE_STATSD",
        "STATSD_HOST",
        "STATSD_PORT",
        "EXTRA_TAGS",
        "STATS_FLUSH_INTERVAL",
        "DISABLE_STATS",
        "USE_PROMETHEUS",
        "PROMETHEUS_ADDR",
        "PROMETHEUS_PATH",
        "PROMETHEUS_MAPPER_YAML",
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
        "RUNTIME_IGNOREDOTFILES",
        "RUNTIME_WATCH_ROOT",
        "EXPIRATION_JITTER_MAX_SECONDS",
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "NEAR_LIMIT_RATIO",
        "CACHE_KEY_PREFIX",
        "BACKEND_TYPE",
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        "LIMIT_RESPONSE_HEADERS_ENABLED",
        "LIMIT_LIMIT_HEADER",
        "LIMIT_REMAINING_HEADER",
        "LIMIT_RESET_HEADER",
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        "REDIS_SOCKET_TYPE",
        "REDIS_TYPE",
        "REDIS_URL",
        "REDIS_POOL_SIZE",
        "REDIS_AUTH",
        "REDIS_SENTINEL_AUTH",
        "REDIS_TLS",
        "REDIS_TLS_CLIENT_CERT",
        "REDIS_TLS_CLIENT_KEY",
        "REDIS_TLS_CACERT",
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        "REDIS_TIMEOUT",
        "REDIS_PIPELINE_WINDOW",
        "REDIS_PIPELINE_LIMIT",
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "REDIS_STARTUP_MAX_INTERVAL",
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "REDIS_PERSECOND",
        "REDIS_PERSECOND_SOCKET_TYPE",
        "REDIS_PERSECOND_TYPE",
        "REDIS_PERSECOND_URL",
        "REDIS_PERSECOND_POOL_SIZE",
        "REDIS_PERSECOND_AUTH",
        "REDIS_PERSECOND_TLS",
        "REDIS_PERSECOND_PIPELINE_WINDOW",
        "REDIS_PERSECOND_PIPELINE_LIMIT",
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "MEMCACHE_HOST_PORT",
        "MEMCACHE_MAX_IDLE_CONNS",
        "MEMCACHE_SRV",
        "MEMCACHE_SRV_REFRESH",
        "MEMCACHE_TLS",
        "MEMCACHE_TLS_CLIENT_CERT",
        "MEMCACHE_TLS_CLIENT_KEY",
        "MEMCACHE_TLS_CACERT",
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        "SHADOW_MODE",
        "QUOTA_MODE",
        "MERGE_DOMAIN_CONFIG",
        "RESPONSE_DYNAMIC_METADATA",
        "TRACING_ENABLED",
        "TRACING_SERVICE_NAME",
        "TRACING_SERVICE_NAMESPACE",
        "TRACING_SERVICE_INSTANCE_ID",
        "TRACING_EXPORTER_PROTOCOL",
        "TRACING_SAMPLING_RATE",
    ];
    // Not honoured: what `serve`'s warning would name, set to a value Spillway never
    // behaves as.
    let covered = |name: &str| {
        REFERENCE.iter().any(|r| r.variables.contains(&name))
            || !not_honoured(&[(name.to_owned(), "\u{1}".to_owned())]).is_empty()
    };
    let missing: Vec<&&str> = SETTINGS_GO.iter().filter(|v| !covered(v)).collect();
    assert!(
        missing.is_empty(),
        "neither honoured nor said not to be: {missing:?}"
    );
    // docs/envoy.md's table lists each of them.
    let unlisted: Vec<&&str> = SETTINGS_GO
        .iter()
        .filter(|v| !REFERENCE_VARIABLES.contains(v))
        .collect();
    assert!(
        unlisted.is_empty(),
        "not in REFERENCE_VARIABLES: {unlisted:?}"
    );
}

/// docs/envoy.md's migration section has one row per reference variable, what the code
/// does with it: the settings it becomes and how (`reference.rs`), or why not
/// (`unhonoured.rs`), generated and compared here.
#[test]
fn the_migration_table_is_the_codes() {
    for v in REFERENCE_VARIABLES {
        assert!(
            migration(v).is_some(),
            "{v}: neither honoured nor said not to be"
        );
    }
    let text = std::fs::read_to_string(root().join("docs/envoy.md")).unwrap();
    let start = "<!-- Generated by `spillway config --reference migration`";
    let end = "<!-- End of the generated table. -->";
    let from = text
        .find(start)
        .expect("docs/envoy.md has the generated table");
    let body_from = from + text[from..].find("-->\n").expect("the comment ends") + 4;
    let body_to = text.find(end).expect("the table's end marker");
    let table = &text[body_from..body_to];
    let made = migration_table();
    assert!(
        table == made,
        "docs/envoy.md's migration table differs from the code at {}\n(regenerate: spillway \
         config --reference migration)",
        first_difference(table, &made)
    );
}

#[test]
fn every_metric_is_on_the_metrics_page_and_every_recorded_one_is_listed() {
    let text = page("metrics.md");
    for m in METRICS {
        assert!(
            text.contains(&format!("| `{}` |", m.name)),
            "the metric `{}` is missing from docs/reference/metrics.md",
            m.name
        );
    }
    // The names the code records: every `"spillway_…"` literal of the service and
    // the tower layer (the tracing targets aside: the log's, the exported spans').
    let mut recorded = Vec::new();
    for dir in ["crates/server/src", "crates/tower/src"] {
        let mut files = vec![root().join(dir)];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, _) in text.match_indices("\"spillway_") {
                    let name: String = text[i + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if !["spillway_server", "spillway_otel"].contains(&name.as_str()) {
                        recorded.push((name, path.clone()));
                    }
                }
            }
        }
    }
    assert!(recorded.len() > 20, "{recorded:?}");
    for (name, file) in &recorded {
        assert!(
            METRICS.iter().any(|m| m.name == name),
            "{} records `{name}`, which the metrics table (crates/server/src/metrics/reference.rs) does not list",
            file.display()
        );
    }
    assert_generated(
        "metrics.md",
        &text,
        &spillway_server::metrics::reference_page(),
    );
}

#[test]
fn the_docs_index_links_both_pages() {
    let index = std::fs::read_to_string(root().join("docs/README.md")).unwrap();
    for page in ["reference/settings.md", "reference/metrics.md"] {
        assert!(
            index.contains(&format!("({page})")),
            "docs/README.md does not link {page}"
        );
    }
}

#[test]
fn the_api_page_is_made_from_the_openapi_document() {
    let made = spillway_server::openapi::reference_page();
    assert_generated("api.md", &page("api.md"), &made);
}
