//! The reference service's environment variables that Spillway honours: how each one
//! becomes settings ([`REFERENCE`], one row each). The ones it does not honour are in
//! `unhonoured.rs`.

use std::path::Path;

use super::ConfigError;
use super::sources::{Origin, Partial};
use super::value::{boolean, redis_url};

/// A variable's value, when set.
pub type Var<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The settings a row gives (name, raw value), or what is wrong.
pub type Values = Result<Vec<(&'static str, String)>, String>;

/// How a row reads its variables.
#[derive(Clone, Copy, Debug)]
pub enum Read {
    /// The first variable's value, when set and not empty, is the first setting's.
    Same,
    /// Any other reading: the settings' raw values, or what is wrong.
    With(fn(Var<'_>) -> Values),
}

/// Some of the reference's variables and the settings they give.
#[derive(Clone, Copy, Debug)]
pub struct ReferenceRow {
    pub variables: &'static [&'static str],
    /// The settings it writes, each with the variables it comes from.
    pub sets: &'static [(&'static str, &'static str)],
    /// A variable that must be true for the others to be read (as the reference reads
    /// them); set without it, they are named as not honoured.
    pub gate: Option<&'static str>,
    /// How the values are read, where it is not plain.
    pub note: &'static str,
    pub read: Read,
}

const fn same(
    variable: &'static [&'static str],
    sets: &'static [(&'static str, &'static str)],
) -> ReferenceRow {
    ReferenceRow {
        variables: variable,
        sets,
        gate: None,
        note: "",
        read: Read::Same,
    }
}

/// `host:port` with the host in brackets when it is IPv6 (`HOST=::`).
fn host_port(host: &str, port: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A listener from a host and a port variable: the reference's defaults for whichever
/// is not set.
fn listener(
    var: &dyn Fn(&str) -> Option<String>,
    (host, port): (&str, &str),
    (default_host, default_port): (&str, &str),
) -> Option<String> {
    if var(host).is_none() && var(port).is_none() {
        return None;
    }
    let h = var(host)
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| default_host.into());
    let p = var(port)
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| default_port.into());
    Some(host_port(&h, &p))
}

fn set_if(
    out: &mut Vec<(&'static str, String)>,
    var: &dyn Fn(&str) -> Option<String>,
    variable: &str,
    setting: &'static str,
) {
    if let Some(v) = var(variable).filter(|v| !v.is_empty()) {
        out.push((setting, v));
    }
}

/// `password` or `user:password`.
fn login(
    var: &dyn Fn(&str) -> Option<String>,
    variable: &str,
    (user, password): (&'static str, &'static str),
) -> Vec<(&'static str, String)> {
    match var(variable).filter(|v| !v.is_empty()) {
        None => Vec::new(),
        Some(v) => match v.split_once(':') {
            Some((u, p)) => vec![(user, u.to_owned()), (password, p.to_owned())],
            None => vec![(password, v)],
        },
    }
}

/// Every reference variable Spillway honours, in rows.
pub static REFERENCE: &[ReferenceRow] = &[
    ReferenceRow {
        variables: &["HOST", "PORT"],
        sets: &[("http_addr", "HOST PORT")],
        gate: None,
        note: "either alone: the reference's default for the other (0.0.0.0, 8080)",
        read: Read::With(|var| {
            Ok(listener(var, ("HOST", "PORT"), ("0.0.0.0", "8080"))
                .map(|a| vec![("http_addr", a)])
                .unwrap_or_default())
        }),
    },
    ReferenceRow {
        variables: &["GRPC_HOST", "GRPC_PORT"],
        sets: &[("grpc_addr", "GRPC_HOST GRPC_PORT")],
        gate: None,
        note: "either alone: the reference's default for the other (0.0.0.0, 8081)",
        read: Read::With(|var| {
            Ok(
                listener(var, ("GRPC_HOST", "GRPC_PORT"), ("0.0.0.0", "8081"))
                    .map(|a| vec![("grpc_addr", a)])
                    .unwrap_or_default(),
            )
        }),
    },
    ReferenceRow {
        variables: &["DEBUG_HOST", "DEBUG_PORT"],
        sets: &[("admin_addr", "DEBUG_HOST DEBUG_PORT")],
        gate: None,
        note: "DEBUG_PORT alone keeps the host on loopback (the reference's is 0.0.0.0): the admin pages show rules and keys",
        read: Read::With(|var| {
            Ok(
                listener(var, ("DEBUG_HOST", "DEBUG_PORT"), ("127.0.0.1", "6070"))
                    .map(|a| vec![("admin_addr", a)])
                    .unwrap_or_default(),
            )
        }),
    },
    ReferenceRow {
        variables: &[
            "GRPC_SERVER_USE_TLS",
            "GRPC_SERVER_TLS_CERT",
            "GRPC_SERVER_TLS_KEY",
            "GRPC_CLIENT_TLS_CACERT",
            "GRPC_CLIENT_TLS_SAN",
        ],
        sets: &[
            ("tls_listeners", "GRPC_SERVER_USE_TLS"),
            ("tls_cert", "GRPC_SERVER_TLS_CERT"),
            ("tls_key", "GRPC_SERVER_TLS_KEY"),
            ("tls_client_ca", "GRPC_CLIENT_TLS_CACERT"),
            ("tls_client_san", "GRPC_CLIENT_TLS_SAN"),
        ],
        gate: Some("GRPC_SERVER_USE_TLS"),
        note: "TLS on the gRPC port only (the HTTP port keeps serving plain probes); the files are read only with GRPC_SERVER_USE_TLS=true, as the reference reads them",
        read: Read::With(|var| {
            let on = var("GRPC_SERVER_USE_TLS")
                .map(|v| boolean(&v))
                .transpose()
                .map_err(|e| format!("GRPC_SERVER_USE_TLS: {e}"))?;
            let mut out = Vec::new();
            if on == Some(true) {
                out.push(("tls_listeners", "grpc".into()));
                set_if(&mut out, var, "GRPC_SERVER_TLS_CERT", "tls_cert");
                set_if(&mut out, var, "GRPC_SERVER_TLS_KEY", "tls_key");
                set_if(&mut out, var, "GRPC_CLIENT_TLS_CACERT", "tls_client_ca");
                set_if(&mut out, var, "GRPC_CLIENT_TLS_SAN", "tls_client_san");
            }
            Ok(out)
        }),
    },
    ReferenceRow {
        variables: &["REDIS_URL", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_TLS"],
        sets: &[("store", "REDIS_URL REDIS_TYPE REDIS_SOCKET_TYPE REDIS_TLS")],
        gate: None,
        note: "one Redis URL: single (host:port, or a socket path), sentinel (master,host:port,...), cluster (host:port,...); a URL is used as it is",
        read: Read::With(|var| match var("REDIS_URL").filter(|u| !u.is_empty()) {
            None => Ok(Vec::new()),
            Some(url) => redis_url(&url, &var)
                .map(|u| vec![("store", u)])
                .map_err(|e| format!("REDIS_URL: {e}")),
        }),
    },
    ReferenceRow {
        variables: &[
            "REDIS_PERSECOND",
            "REDIS_PERSECOND_URL",
            "REDIS_PERSECOND_TYPE",
            "REDIS_PERSECOND_SOCKET_TYPE",
            "REDIS_PERSECOND_TLS",
        ],
        sets: &[(
            "per_second_store",
            "REDIS_PERSECOND REDIS_PERSECOND_URL REDIS_PERSECOND_TYPE REDIS_PERSECOND_SOCKET_TYPE REDIS_PERSECOND_TLS",
        )],
        gate: Some("REDIS_PERSECOND"),
        note: "with REDIS_PERSECOND=true, one Redis URL read as REDIS_URL is (REDIS_PERSECOND_TYPE, _SOCKET_TYPE, _TLS): the rules whose window is one second decide there",
        read: Read::With(|var| {
            let on = var("REDIS_PERSECOND")
                .map(|v| boolean(&v))
                .transpose()
                .map_err(|e| format!("REDIS_PERSECOND: {e}"))?;
            if on != Some(true) {
                return Ok(Vec::new());
            }
            let url = var("REDIS_PERSECOND_URL")
                .filter(|u| !u.is_empty())
                .ok_or("REDIS_PERSECOND=true needs REDIS_PERSECOND_URL")?;
            let own = |name: &str| var(&name.replacen("REDIS_", "REDIS_PERSECOND_", 1));
            redis_url(&url, &own)
                .map(|u| vec![("per_second_store", u)])
                .map_err(|e| {
                    format!(
                        "REDIS_PERSECOND_URL: {}",
                        e.replace("REDIS_", "REDIS_PERSECOND_")
                    )
                })
        }),
    },
    ReferenceRow {
        variables: &["REDIS_PERSECOND_AUTH"],
        sets: &[
            ("per_second_redis_username", "REDIS_PERSECOND_AUTH"),
            ("per_second_redis_password", "REDIS_PERSECOND_AUTH"),
        ],
        gate: Some("REDIS_PERSECOND"),
        note: "`password` or `user:password`",
        read: Read::With(|var| {
            Ok(login(
                var,
                "REDIS_PERSECOND_AUTH",
                ("per_second_redis_username", "per_second_redis_password"),
            ))
        }),
    },
    ReferenceRow {
        variables: &["REDIS_PERSECOND_SENTINEL_AUTH"],
        sets: &[
            (
                "per_second_redis_sentinel_username",
                "REDIS_PERSECOND_SENTINEL_AUTH",
            ),
            (
                "per_second_redis_sentinel_password",
                "REDIS_PERSECOND_SENTINEL_AUTH",
            ),
        ],
        gate: Some("REDIS_PERSECOND"),
        note: "`password` or `user:password`",
        read: Read::With(|var| {
            Ok(login(
                var,
                "REDIS_PERSECOND_SENTINEL_AUTH",
                (
                    "per_second_redis_sentinel_username",
                    "per_second_redis_sentinel_password",
                ),
            ))
        }),
    },
    ReferenceRow {
        variables: &["REDIS_PERSECOND_TIMEOUT"],
        sets: &[("per_second_store_timeout", "REDIS_PERSECOND_TIMEOUT")],
        gate: Some("REDIS_PERSECOND"),
        note: "as set (unset: the per-second store takes store_timeout, 10ms, not the reference's 10s, which would outlast Envoy's deadline)",
        read: Read::Same,
    },
    ReferenceRow {
        variables: &["REDIS_TIMEOUT"],
        sets: &[("store_timeout", "REDIS_TIMEOUT")],
        gate: None,
        note: "as set (unset: 10ms, not the reference's 10s, which would outlast Envoy's 20 ms deadline)",
        read: Read::Same,
    },
    ReferenceRow {
        variables: &["REDIS_PIPELINE_WINDOW"],
        sets: &[("store_window", "REDIS_PIPELINE_WINDOW")],
        gate: None,
        note: "as set, at most 1ms: a decision that finds no store call in flight waits it for others to share its call, as the reference's pipeline flushes after its window (unset: 0, at once, as the reference)",
        read: Read::Same,
    },
    ReferenceRow {
        variables: &["REDIS_AUTH"],
        sets: &[
            ("redis_username", "REDIS_AUTH"),
            ("redis_password", "REDIS_AUTH"),
        ],
        gate: None,
        note: "`password` or `user:password`",
        read: Read::With(|var| {
            Ok(login(
                var,
                "REDIS_AUTH",
                ("redis_username", "redis_password"),
            ))
        }),
    },
    ReferenceRow {
        variables: &["REDIS_SENTINEL_AUTH"],
        sets: &[
            ("redis_sentinel_username", "REDIS_SENTINEL_AUTH"),
            ("redis_sentinel_password", "REDIS_SENTINEL_AUTH"),
        ],
        gate: None,
        note: "`password` or `user:password`",
        read: Read::With(|var| {
            Ok(login(
                var,
                "REDIS_SENTINEL_AUTH",
                ("redis_sentinel_username", "redis_sentinel_password"),
            ))
        }),
    },
    same(
        &["REDIS_TLS_CACERT"],
        &[("redis_tls_ca", "REDIS_TLS_CACERT")],
    ),
    same(
        &["REDIS_TLS_CLIENT_CERT"],
        &[("redis_tls_cert", "REDIS_TLS_CLIENT_CERT")],
    ),
    same(
        &["REDIS_TLS_CLIENT_KEY"],
        &[("redis_tls_key", "REDIS_TLS_CLIENT_KEY")],
    ),
    ReferenceRow {
        variables: &["REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"],
        sets: &[("redis_tls_verify", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")],
        gate: None,
        note: "true: `chain`",
        read: Read::With(|var| match var("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
            Some(v)
                if boolean(&v)
                    .map_err(|e| format!("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: {e}"))? =>
            {
                Ok(vec![("redis_tls_verify", "chain".into())])
            }
            _ => Ok(Vec::new()),
        }),
    },
    ReferenceRow {
        variables: &[
            "RUNTIME_ROOT",
            "RUNTIME_SUBDIRECTORY",
            "RUNTIME_APPDIRECTORY",
        ],
        sets: &[(
            "config",
            "RUNTIME_ROOT RUNTIME_SUBDIRECTORY RUNTIME_APPDIRECTORY",
        )],
        gate: None,
        note: "ROOT/SUBDIRECTORY/APPDIRECTORY, with the reference's defaults (/srv/runtime_data/current, empty, config)",
        read: Read::With(|var| {
            if var("RUNTIME_ROOT").is_none() && var("RUNTIME_SUBDIRECTORY").is_none() {
                return Ok(Vec::new());
            }
            let root = var("RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".into());
            let sub = var("RUNTIME_SUBDIRECTORY").unwrap_or_default();
            let app = var("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".into());
            Ok(vec![(
                "config",
                Path::new(&root).join(sub).join(app).display().to_string(),
            )])
        }),
    },
    ReferenceRow {
        variables: &["RUNTIME_WATCH_ROOT"],
        sets: &[],
        gate: None,
        note: "either value: Spillway watches the policy directory and reloads on any change in it",
        read: Read::With(|_| Ok(Vec::new())),
    },
    ReferenceRow {
        variables: &[
            "USE_PROMETHEUS",
            "PROMETHEUS_ADDR",
            "PROMETHEUS_PATH",
            "PROMETHEUS_MAPPER_YAML",
        ],
        sets: &[
            ("metrics_addr", "USE_PROMETHEUS PROMETHEUS_ADDR"),
            ("metrics_path", "PROMETHEUS_PATH"),
            ("prometheus_mapper", "PROMETHEUS_MAPPER_YAML"),
        ],
        gate: Some("USE_PROMETHEUS"),
        note: "a Prometheus listener of its own (default :9090, /metrics) serving the reference's series named by the mapping file (default: the reference's mapping) beside spillway_*, only with USE_PROMETHEUS=true",
        read: Read::With(|var| {
            let on = var("USE_PROMETHEUS")
                .map(|v| boolean(&v))
                .transpose()
                .map_err(|e| format!("USE_PROMETHEUS: {e}"))?;
            if on != Some(true) {
                return Ok(Vec::new());
            }
            let mut out = vec![(
                "metrics_addr",
                var("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into()),
            )];
            set_if(&mut out, var, "PROMETHEUS_PATH", "metrics_path");
            set_if(&mut out, var, "PROMETHEUS_MAPPER_YAML", "prometheus_mapper");
            Ok(out)
        }),
    },
    ReferenceRow {
        variables: &["CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL"],
        sets: &[("xds_server", "CONFIG_TYPE CONFIG_GRPC_XDS_SERVER_URL")],
        gate: None,
        note: "FILE (the default) or GRPC_XDS_SOTW (rules over xDS from the URL, default localhost:18000); anything else stops the start, as in the reference",
        read: Read::With(|var| {
            match var("CONFIG_TYPE")
                .map(|v| v.to_ascii_uppercase())
                .as_deref()
            {
                None | Some("FILE") => Ok(Vec::new()),
                Some("GRPC_XDS_SOTW") => Ok(vec![(
                    "xds_server",
                    var("CONFIG_GRPC_XDS_SERVER_URL")
                        .filter(|v| !v.is_empty())
                        .unwrap_or_else(|| "localhost:18000".into()),
                )]),
                Some(other) => Err(format!(
                    "CONFIG_TYPE: `{other}` is not FILE or GRPC_XDS_SOTW"
                )),
            }
        }),
    },
    same(
        &["CONFIG_GRPC_XDS_NODE_ID"],
        &[("xds_node_id", "CONFIG_GRPC_XDS_NODE_ID")],
    ),
    same(
        &["CONFIG_GRPC_XDS_NODE_METADATA"],
        &[("xds_node_metadata", "CONFIG_GRPC_XDS_NODE_METADATA")],
    ),
    same(
        &["CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"],
        &[("xds_headers", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")],
    ),
    ReferenceRow {
        variables: &[
            "CONFIG_GRPC_XDS_SERVER_USE_TLS",
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
        ],
        sets: &[
            ("xds_tls", "CONFIG_GRPC_XDS_SERVER_USE_TLS"),
            ("xds_tls_cert", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
            ("xds_tls_key", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
            ("xds_tls_ca", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
            ("xds_tls_san", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
        ],
        gate: Some("CONFIG_GRPC_XDS_SERVER_USE_TLS"),
        note: "the files are read only with CONFIG_GRPC_XDS_SERVER_USE_TLS=true, as the reference reads them",
        read: Read::With(|var| {
            let on = var("CONFIG_GRPC_XDS_SERVER_USE_TLS")
                .map(|v| boolean(&v))
                .transpose()
                .map_err(|e| format!("CONFIG_GRPC_XDS_SERVER_USE_TLS: {e}"))?;
            let mut out = Vec::new();
            match on {
                Some(true) => {
                    out.push(("xds_tls", "true".into()));
                    set_if(
                        &mut out,
                        var,
                        "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                        "xds_tls_cert",
                    );
                    set_if(
                        &mut out,
                        var,
                        "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
                        "xds_tls_key",
                    );
                    set_if(
                        &mut out,
                        var,
                        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                        "xds_tls_ca",
                    );
                    set_if(
                        &mut out,
                        var,
                        "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
                        "xds_tls_san",
                    );
                }
                Some(false) => out.push(("xds_tls", "false".into())),
                None => {}
            }
            Ok(out)
        }),
    },
    same(
        &["XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"],
        &[("xds_backoff_initial", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL")],
    ),
    same(
        &["XDS_CLIENT_BACKOFF_MAX_INTERVAL"],
        &[("xds_backoff_max", "XDS_CLIENT_BACKOFF_MAX_INTERVAL")],
    ),
    same(
        &["XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"],
        &[("xds_max_message_bytes", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")],
    ),
    same(
        &["FORCE_START_WITHOUT_INITIAL_CONFIG"],
        &[(
            "xds_ready_without_rules",
            "FORCE_START_WITHOUT_INITIAL_CONFIG",
        )],
    ),
    same(
        &["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"],
        &[(
            "ready_needs_a_domain",
            "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
        )],
    ),
    same(
        &["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"],
        &[(
            "health_follows_store",
            "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        )],
    ),
    ReferenceRow {
        variables: &[
            "USE_STATSD",
            "STATSD_HOST",
            "STATSD_PORT",
            "STATSD_PROTOCOL",
            "USE_DOG_STATSD",
            "DISABLE_STATS",
        ],
        sets: &[
            (
                "statsd_addr",
                "USE_STATSD STATSD_HOST STATSD_PORT USE_DOG_STATSD DISABLE_STATS",
            ),
            ("statsd_protocol", "STATSD_PROTOCOL USE_DOG_STATSD"),
            ("dogstatsd", "USE_DOG_STATSD"),
            ("reference_metrics", "DISABLE_STATS"),
        ],
        gate: None,
        note: "statsd to STATSD_HOST:STATSD_PORT (localhost:8125) unless USE_STATSD=false, over STATSD_PROTOCOL (tcp, as gostats; DogStatsD over udp); DISABLE_STATS=true sends none and serves none of the reference's series",
        read: Read::With(|var| {
            let flag = |name: &str| {
                var(name)
                    .map(|v| boolean(&v))
                    .transpose()
                    .map_err(|e| format!("{name}: {e}"))
            };
            let (statsd, dog, disabled) = (
                flag("USE_STATSD")?,
                flag("USE_DOG_STATSD")?,
                flag("DISABLE_STATS")?,
            );
            if disabled == Some(true) {
                return Ok(vec![
                    ("statsd_addr", String::new()),
                    ("reference_metrics", "false".into()),
                ]);
            }
            let dog = dog == Some(true);
            let mut out = Vec::new();
            let named = ["STATSD_HOST", "STATSD_PORT"]
                .iter()
                .any(|v| var(v).is_some());
            if statsd == Some(false) && !dog {
                out.push(("statsd_addr", String::new()));
            } else if dog || statsd == Some(true) || named {
                let host = var("STATSD_HOST").filter(|h| !h.is_empty());
                let port = var("STATSD_PORT").filter(|p| !p.is_empty());
                out.push((
                    "statsd_addr",
                    host_port(
                        host.as_deref().unwrap_or("localhost"),
                        port.as_deref().unwrap_or("8125"),
                    ),
                ));
            }
            if dog {
                out.push(("dogstatsd", "true".into()));
                out.push(("statsd_protocol", "udp".into()));
            } else {
                set_if(&mut out, var, "STATSD_PROTOCOL", "statsd_protocol");
            }
            Ok(out)
        }),
    },
    ReferenceRow {
        variables: &["USE_DOG_STATSD_MOGRIFIERS"],
        sets: &[(
            "dogstatsd_mogrifiers",
            "USE_DOG_STATSD_MOGRIFIERS DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS}",
        )],
        gate: None,
        note: "each listed NAME from DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS (k:v,...), in the listed order (the reference's order is a Go map's: random)",
        read: Read::With(|var| {
            let Some(names) = var("USE_DOG_STATSD_MOGRIFIERS").filter(|v| !v.is_empty()) else {
                return Ok(Vec::new());
            };
            let mut list = Vec::new();
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let part = |p: &str| var(&format!("DOG_STATSD_MOGRIFIER_{name}_{p}"));
                let pattern = part("PATTERN")
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| format!("DOG_STATSD_MOGRIFIER_{name}_PATTERN is not set"))?;
                let rename = part("NAME")
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| format!("DOG_STATSD_MOGRIFIER_{name}_NAME is not set"))?;
                let tags = super::value::pairs(&part("TAGS").unwrap_or_default(), ':')
                    .map_err(|e| format!("DOG_STATSD_MOGRIFIER_{name}_TAGS: {e}"))?;
                list.push(super::Mogrifier {
                    pattern,
                    name: rename,
                    tags,
                });
            }
            let json = serde_json::to_string(&list).map_err(|e| e.to_string())?;
            Ok(vec![("dogstatsd_mogrifiers", json)])
        }),
    },
    same(&["EXTRA_TAGS"], &[("stats_tags", "EXTRA_TAGS")]),
    same(
        &["STATS_FLUSH_INTERVAL"],
        &[("stats_flush_interval", "STATS_FLUSH_INTERVAL")],
    ),
    same(
        &["GRPC_MAX_CONNECTION_AGE"],
        &[("max_connection_age", "GRPC_MAX_CONNECTION_AGE")],
    ),
    same(
        &["GRPC_MAX_CONNECTION_AGE_GRACE"],
        &[("max_connection_age_grace", "GRPC_MAX_CONNECTION_AGE_GRACE")],
    ),
    same(&["GRPC_UDS"], &[("grpc_uds", "GRPC_UDS")]),
    ReferenceRow {
        variables: &[
            "TRACING_ENABLED",
            "TRACING_EXPORTER_PROTOCOL",
            "TRACING_SERVICE_NAME",
            "TRACING_SERVICE_NAMESPACE",
            "TRACING_SERVICE_INSTANCE_ID",
            "TRACING_SAMPLING_RATE",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ],
        sets: &[
            (
                "tracing_endpoint",
                "TRACING_ENABLED OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            ),
            ("tracing_protocol", "TRACING_EXPORTER_PROTOCOL"),
            ("tracing_service_name", "TRACING_SERVICE_NAME"),
            ("tracing_service_namespace", "TRACING_SERVICE_NAMESPACE"),
            ("tracing_service_instance_id", "TRACING_SERVICE_INSTANCE_ID"),
            ("tracing_sampling_rate", "TRACING_SAMPLING_RATE"),
        ],
        gate: Some("TRACING_ENABLED"),
        note: "with TRACING_ENABLED=true: spans to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or OTEL_EXPORTER_OTLP_ENDPOINT (http: + /v1/traces), or OpenTelemetry's default (localhost:4318, or :4317 over grpc); a URL without a scheme is http://",
        read: Read::With(|var| {
            let on = var("TRACING_ENABLED")
                .map(|v| boolean(&v))
                .transpose()
                .map_err(|e| format!("TRACING_ENABLED: {e}"))?;
            if on != Some(true) {
                return Ok(Vec::new());
            }
            let protocol = var("TRACING_EXPORTER_PROTOCOL").unwrap_or_else(|| "http".into());
            let grpc = super::value::otlp_protocol(&protocol)
                .map_err(|e| format!("TRACING_EXPORTER_PROTOCOL: {e}"))?
                == super::OtlpProtocol::Grpc;
            let scheme = |u: String| {
                if u.contains("://") {
                    u
                } else {
                    format!("http://{u}")
                }
            };
            let endpoint = match (
                var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").filter(|v| !v.is_empty()),
                var("OTEL_EXPORTER_OTLP_ENDPOINT").filter(|v| !v.is_empty()),
            ) {
                (Some(traces), _) => scheme(traces),
                (None, Some(base)) if grpc => scheme(base),
                (None, Some(base)) => format!("{}/v1/traces", scheme(base).trim_end_matches('/')),
                (None, None) if grpc => "http://localhost:4317".into(),
                (None, None) => "http://localhost:4318/v1/traces".into(),
            };
            let mut out = vec![
                ("tracing_endpoint", endpoint),
                ("tracing_protocol", protocol),
            ];
            set_if(
                &mut out,
                var,
                "TRACING_SERVICE_NAME",
                "tracing_service_name",
            );
            set_if(
                &mut out,
                var,
                "TRACING_SERVICE_NAMESPACE",
                "tracing_service_namespace",
            );
            set_if(
                &mut out,
                var,
                "TRACING_SERVICE_INSTANCE_ID",
                "tracing_service_instance_id",
            );
            set_if(
                &mut out,
                var,
                "TRACING_SAMPLING_RATE",
                "tracing_sampling_rate",
            );
            Ok(out)
        }),
    },
    same(&["LOG_LEVEL"], &[("log_level", "LOG_LEVEL")]),
    same(&["LOG_FORMAT"], &[("log_format", "LOG_FORMAT")]),
    same(&["SHADOW_MODE"], &[("shadow_mode", "SHADOW_MODE")]),
    same(&["QUOTA_MODE"], &[("quota_mode", "QUOTA_MODE")]),
    same(
        &["NEAR_LIMIT_RATIO"],
        &[("near_limit_ratio", "NEAR_LIMIT_RATIO")],
    ),
    ReferenceRow {
        variables: &["LOCAL_CACHE_SIZE_IN_BYTES"],
        sets: &[
            ("deny_cache_bytes", "LOCAL_CACHE_SIZE_IN_BYTES"),
            ("reference_local_cache", "LOCAL_CACHE_SIZE_IN_BYTES"),
        ],
        gate: None,
        note: "the deny cache's size; above 0 it also answers reference rules until their window ends, as the reference's cache",
        read: Read::With(|var| match var("LOCAL_CACHE_SIZE_IN_BYTES") {
            None => Ok(Vec::new()),
            Some(v) => {
                let n: usize = v.trim().parse().map_err(|_| {
                    format!("LOCAL_CACHE_SIZE_IN_BYTES: `{v}` is not a whole number")
                })?;
                Ok(vec![
                    ("deny_cache_bytes", n.to_string()),
                    ("reference_local_cache", (n > 0).to_string()),
                ])
            }
        }),
    },
    same(
        &["STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"],
        &[(
            "stop_increment_when_over_limit",
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        )],
    ),
    same(
        &["RESPONSE_DYNAMIC_METADATA"],
        &[("dynamic_metadata", "RESPONSE_DYNAMIC_METADATA")],
    ),
    same(
        &["MERGE_DOMAIN_CONFIG"],
        &[("merge_domains", "MERGE_DOMAIN_CONFIG")],
    ),
    same(&["CACHE_KEY_PREFIX"], &[("key_prefix", "CACHE_KEY_PREFIX")]),
    same(
        &["LIMIT_RESPONSE_HEADERS_ENABLED"],
        &[("reference_headers", "LIMIT_RESPONSE_HEADERS_ENABLED")],
    ),
    same(
        &["LIMIT_LIMIT_HEADER"],
        &[("reference_limit_header", "LIMIT_LIMIT_HEADER")],
    ),
    same(
        &["LIMIT_REMAINING_HEADER"],
        &[("reference_remaining_header", "LIMIT_REMAINING_HEADER")],
    ),
    same(
        &["LIMIT_RESET_HEADER"],
        &[("reference_reset_header", "LIMIT_RESET_HEADER")],
    ),
];

impl Partial {
    /// The reference's variables that are set, read through [`REFERENCE`].
    pub fn from_reference(var: &dyn Fn(&str) -> Option<String>) -> Result<Partial, ConfigError> {
        let mut p = Partial::default();
        for row in REFERENCE {
            let values = match row.read {
                Read::Same => var(row.variables[0])
                    .filter(|v| !v.is_empty())
                    .map(|v| vec![(row.sets[0].0, v)])
                    .unwrap_or_default(),
                Read::With(read) => read(var).map_err(ConfigError)?,
            };
            if values.is_empty() {
                continue;
            }
            let set: Vec<&str> = row
                .variables
                .iter()
                .copied()
                .filter(|v| var(v).is_some())
                .collect();
            let origin = Origin::Reference(set.join("+"));
            for (name, value) in values {
                p.set(name, value, origin.clone())?;
            }
        }
        Ok(p)
    }
}
