//! The README's inventories held to the tree: every crate (with its package name), every
//! example, every fuzz target in "What is here"; every page of the manual linked; every
//! algorithm and every subcommand named; every HTTP operation and gRPC method listed in
//! docs/service.md and the reference pages. A piece added without its line fails here.

use crate::support;

use std::process::Command;

use support::docs::root;

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).unwrap()
}

/// The names in `dir` (files and directories), sorted.
fn entries(dir: &str) -> Vec<(String, bool)> {
    let mut found: Vec<(String, bool)> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.file_type().unwrap().is_dir(),
            )
        })
        .collect();
    found.sort();
    found
}

/// What `readme` lacks of the tree: `what: name`.
fn missing(readme: &str) -> Vec<String> {
    let here = readme
        .split("## What is here")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let row = |start: &str| {
        here.lines()
            .find(|l| l.starts_with(&format!("| `{start}")))
            .unwrap_or_default()
            .to_owned()
    };
    let mut lacks = Vec::new();
    for (name, _) in entries("crates") {
        let manifest =
            std::fs::read_to_string(root().join(format!("crates/{name}/Cargo.toml"))).unwrap();
        let package = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or_default();
        if !here.contains(&format!("| `crates/{name}` (`{package}`) |")) {
            lacks.push(format!("crate: crates/{name} ({package})"));
        }
    }
    let examples = row("examples/");
    for (name, dir) in entries("examples") {
        let shown = if dir {
            format!("`{name}/`")
        } else {
            format!("`{name}`")
        };
        if !examples.contains(&shown) {
            lacks.push(format!("example: {shown}"));
        }
    }
    let fuzz = row("fuzz/");
    for (name, _) in entries("fuzz/fuzz_targets") {
        let target = name.trim_end_matches(".rs");
        if !fuzz.contains(&format!("`{target}`")) {
            lacks.push(format!("fuzz target: {target}"));
        }
    }
    for (name, dir) in entries("docs") {
        if !dir && name.ends_with(".md") && !readme.contains(&format!("](docs/{name}")) {
            lacks.push(format!("page: docs/{name} (not linked)"));
        }
    }
    let lower = readme.to_lowercase();
    for algorithm in algorithms() {
        if !lower.contains(&algorithm.replace('_', " ")) {
            lacks.push(format!("algorithm: {algorithm}"));
        }
    }
    for command in subcommands() {
        if !readme.contains(&format!("`{command}`")) {
            lacks.push(format!("subcommand: {command}"));
        }
    }
    lacks
}

/// Every algorithm's name, as `Algorithm::name` answers them.
fn algorithms() -> Vec<String> {
    let kind = std::fs::read_to_string(root().join("crates/core/src/algorithm/kind.rs")).unwrap();
    let body = kind
        .split("pub fn name(&self) -> &'static str {")
        .nth(1)
        .unwrap()
        .split("\n    }\n")
        .next()
        .unwrap();
    body.lines()
        .filter(|l| l.contains("Algorithm::"))
        .filter_map(|l| l.split("=> \"").nth(1)?.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// The subcommands `spillway --help` lists, but `help`.
fn subcommands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    help.split("Commands:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_names_every_crate_example_fuzz_target_page_algorithm_and_subcommand() {
    assert_eq!(algorithms().len(), 8, "{:?}", algorithms());
    assert!(subcommands().len() >= 8, "{:?}", subcommands());
    let lacks = missing(&readme());
    assert!(
        lacks.is_empty(),
        "README.md does not name (in \"What is here\", or anywhere for pages, algorithms \
         and subcommands):\n{}",
        lacks.join("\n")
    );
}

#[test]
fn a_piece_the_readme_leaves_out_is_found() {
    let text = readme();
    let without = text
        .replace(", `rlqs`;", ";")
        .replace("`simulate`", "simulate");
    assert_eq!(
        missing(&without),
        ["fuzz target: rlqs", "subcommand: simulate"]
    );
    let unlinked = text.replace("](docs/tower.md)", "](https://example.com)");
    assert_eq!(missing(&unlinked), ["page: docs/tower.md (not linked)"]);
}

/// Every operation of the OpenAPI document (method and path, tagged by listener), read
/// from the document itself.
fn operations() -> Vec<(String, String, Vec<String>)> {
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("crates/server/src/api/openapi.json")).unwrap(),
    )
    .unwrap();
    let mut found = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let tags = op["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect();
            found.push((method.to_uppercase(), path.clone(), tags));
        }
    }
    found
}

/// The gRPC methods the service answers: Envoy's two protocols and health.
const GRPC: [&str; 3] = [
    "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    "envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
    "grpc.health.v1.Health/Check",
];

/// What the pages users read for the surface lack: docs/service.md's endpoints (every
/// path, every gRPC method), docs/reference/settings.md's listener rows (each path on
/// its own listener's row) and docs/reference/api.md (every gRPC method).
fn unlisted(service: &str, settings: &str, api: &str) -> Vec<String> {
    let row = |name: &str| {
        settings
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}`")))
            .unwrap_or_default()
            .to_owned()
    };
    let (check_row, admin_row) = (row("http_addr"), row("admin_addr"));
    let mut lacks = Vec::new();
    for (method, path, tags) in operations() {
        if !service.contains(&format!("{path}`")) && !service.contains(&format!("{path}?")) {
            lacks.push(format!("docs/service.md: {method} {path}"));
        }
        // Its listener's row names it up to its first parameter (`/v1/limits`).
        let stem = path.split("/{").next().unwrap_or(&path);
        for (listener, text) in [("check", &check_row), ("admin", &admin_row)] {
            let only_here = tags.len() == 1 && tags[0] == listener;
            if only_here && !text.contains(stem) {
                lacks.push(format!("settings.md {listener} listener row: {stem}"));
            }
        }
    }
    for method in GRPC {
        for (page, text) in [("docs/service.md", service), ("docs/reference/api.md", api)] {
            if !text.contains(method) {
                lacks.push(format!("{page}: {method}"));
            }
        }
    }
    lacks
}

#[test]
fn every_http_operation_and_grpc_method_is_listed_where_users_look() {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).unwrap();
    let (service, settings, api) = (
        read("docs/service.md"),
        read("docs/reference/settings.md"),
        read("docs/reference/api.md"),
    );
    assert!(operations().len() >= 24, "{:?}", operations());
    let lacks = unlisted(&service, &settings, &api);
    assert!(lacks.is_empty(), "not listed:\n{}", lacks.join("\n"));
    // And the check has teeth: a page without one of them is found.
    let without = service.replace("`POST /v1/acquire`, ", "");
    assert_eq!(
        unlisted(&without, &settings, &api),
        ["docs/service.md: POST /v1/acquire"]
    );
    let without = api.replace("RateLimitQuotaService/StreamRateLimitQuotas", "…");
    assert_eq!(
        unlisted(&service, &settings, &without),
        [
            "docs/reference/api.md: envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"
        ]
    );
}
