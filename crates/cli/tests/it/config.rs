//! `spillway config`: the configuration `serve` would run with, each value with where
//! it came from, secrets masked; and its errors.

use crate::support;

use std::process::{Command, Output};

use support::tempdir;

fn config(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("config")
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("spillway runs")
}

/// The line of `setting` in the output, its columns split.
fn line<'a>(out: &'a str, setting: &str) -> Vec<&'a str> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.first() == Some(&setting))
        .unwrap_or_else(|| panic!("no line for {setting}:\n{out}"))
}

#[test]
fn every_value_says_where_it_came_from_and_secrets_are_masked() {
    let dir = tempdir("config-sources");
    let file = dir.join("spillway.yaml");
    std::fs::write(
        &file,
        "config: rules\nbreaker_failures: 3\nstore_timeout: 50ms\n",
    )
    .unwrap();
    let out = config(
        &[
            "--settings",
            file.to_str().unwrap(),
            "--store-timeout",
            "20ms",
            "--no-ui",
        ],
        &[
            ("REDIS_URL", "redis://app:hunter2@redis.internal:6379"),
            ("REDIS_AUTH", "ops:s3cret"),
            ("SPILLWAY_SHADOW_MODE", "true"),
            ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("# the reference's defaults"),
        "a reference variable is set: {text}"
    );
    let file = file.display().to_string();
    let rules = dir.join("rules").display().to_string();
    assert_eq!(line(&text, "config"), ["config", &rules, "file", &file]);
    assert_eq!(
        line(&text, "breaker_failures"),
        ["breaker_failures", "3", "file", &file]
    );
    assert_eq!(
        line(&text, "store_timeout"),
        ["store_timeout", "20ms", "flag", "--store-timeout"]
    );
    assert_eq!(line(&text, "ui"), ["ui", "false", "flag", "--no-ui"]);
    assert_eq!(
        line(&text, "shadow_mode"),
        ["shadow_mode", "true", "env", "SPILLWAY_SHADOW_MODE"]
    );
    assert_eq!(
        line(&text, "store"),
        [
            "store",
            "redis://app:***@redis.internal:6379",
            "env",
            "REDIS_URL"
        ]
    );
    assert_eq!(
        line(&text, "redis_password"),
        ["redis_password", "***", "env", "REDIS_AUTH"]
    );
    assert_eq!(
        line(&text, "redis_username"),
        ["redis_username", "ops", "env", "REDIS_AUTH"]
    );
    assert_eq!(
        line(&text, "http_addr"),
        ["http_addr", "0.0.0.0:8080", "default"]
    );
    assert_eq!(
        line(&text, "xds_backoff_initial"),
        [
            "xds_backoff_initial",
            "10s",
            "default",
            "(the",
            "reference's)"
        ]
    );
    assert!(
        !text.contains("hunter2") && !text.contains("s3cret"),
        "{text}"
    );
    assert!(
        text.contains("# not honoured: GRPC_SERVER_TLS_CERT: "),
        "a certificate without GRPC_SERVER_USE_TLS is named: {text}"
    );

    let sans = config(&["--tls-client-san", "a", "--tls-client-san", "b,c"], &[]);
    let sans = String::from_utf8(sans.stdout).unwrap();
    assert_eq!(
        line(&sans, "tls_client_san"),
        ["tls_client_san", "a,b,c", "flag", "--tls-client-san"],
        "a list flag repeats"
    );

    let changed = String::from_utf8(config(&["--changed", "--shadow-mode"], &[]).stdout).unwrap();
    assert_eq!(
        changed,
        "# Spillway's defaults (no reference variable is set)\nshadow_mode  true  flag --shadow-mode\n"
    );
}

#[test]
fn a_setting_that_cannot_be_used_is_an_error_that_names_it() {
    let dir = tempdir("config-errors");
    let file = dir.join("spillway.yaml");
    std::fs::write(&file, "stroe_timeout: 5ms\n").unwrap();
    // (arguments, environment, what the error says)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case<'_>; 5] = [
        (
            &["--settings", file.to_str().unwrap()],
            &[],
            "unknown setting `stroe_timeout` (did you mean `store_timeout`?)",
        ),
        (
            &["--store-timeout", "soon"],
            &[],
            "--store-timeout: `soon` is not a duration",
        ),
        (&[], &[("SPILLWAY_HEADERS", "loud")], "SPILLWAY_HEADERS: "),
        (
            &[],
            &[("GRPC_PORT", "grpc")],
            "GRPC_PORT: `0.0.0.0:grpc` is not an address",
        ),
        (
            &[],
            &[("GRPC_SERVER_USE_TLS", "true")],
            "refusing to serve plaintext",
        ),
    ];
    for (args, env, expected) in cases {
        let out = config(args, env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {out:?}");
        assert!(err.contains(expected), "{args:?} {env:?}: {err}");
    }
}
