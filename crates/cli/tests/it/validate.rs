//! `spillway validate` as a process: valid files summarised, every error of broken ones
//! printed with file, line and field, exit status 1 on any error, and JSON.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn validate(args: &[&str], path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("validate")
        .args(args)
        .arg(path)
        .output()
        .expect("spillway runs")
}

fn examples(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(p)
}

#[test]
fn valid_files_are_summarised() {
    let out = validate(&[], &examples("policies"));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("valid, 2 domains, 7 rules"), "{text}");
    assert!(
        text.contains("burst: 10 per 1s (gcra) burst 20 [on_store_error: local]"),
        "{text}"
    );
    assert!(
        text.contains("tenant-hourly: 5000 per 3600s (sliding_log) [shadow]"),
        "{text}"
    );

    let out = validate(&["--json"], &examples("envoy/rl.yaml"));
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    let rules = v["domains"][0]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 8);
    let banned = rules
        .iter()
        .find(|r| r["path"] == "foo.bar_banned")
        .unwrap();
    assert_eq!(banned["kind"], "block_all");
}

#[test]
fn every_error_is_printed_and_the_exit_status_is_one() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("validate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.yaml"), "domain: a\ndescriptors:\n  - key: ''\n  - key: k\n    limits: [{limit: 10, window: soon}]\n").unwrap();
    std::fs::write(dir.join("b.yaml"), "domain: a\n").unwrap();

    let out = validate(&[], &dir);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines[0].ends_with("a.yaml:3: descriptors[0].key: descriptor has an empty key"),
        "{err}"
    );
    assert!(
        lines[1].contains("a.yaml:5: descriptors[1].limits[0].window: `soon` is not a duration"),
        "{err}"
    );
    assert!(
        lines[2].contains("b.yaml: domain: duplicate domain 'a'"),
        "{err}"
    );
    assert!(lines[3].starts_with("3 errors in"), "{err}");

    let out = validate(&["--json"], &dir);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["errors"][0]["line"], 3);
    assert_eq!(v["errors"][0]["field"], "descriptors[0].key");

    let out = validate(&[], &dir.join("missing"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("missing: cannot read")
    );
}

#[test]
fn a_shared_limit_is_printed_with_its_error_bound() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("validate-share-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("api.yaml"),
        "domain: api\ndescriptors:\n  - key: user\n    limits:\n      \
         - { name: api, limit: 1000, window: 1m, lease: 20 }\n      \
         - { name: feed, limit: 100000, window: 1m, sync: 100ms }\n",
    )
    .unwrap();
    let out = validate(&[], &dir);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("api: 1000 per 60s (fixed_window) [lease 20: never over; may under-admit by up to 20 per server per window]"),
        "{text}"
    );
    assert!(
        text.contains("[sync 100ms: never under; may over-admit by up to what the servers admit in 200ms (2 × sync) per window]"),
        "{text}"
    );
    let out = validate(&["--json"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["domains"][0]["rules"][0]["sharing"], "lease 20");
    assert_eq!(v["domains"][0]["rules"][1]["sharing"], "sync 100ms");
}

/// `--diff CANDIDATE`: every rule added, removed or changed, and whole domains; nothing
/// for identical sets; exit 1 when the candidate does not load.
#[test]
fn a_candidate_is_compared_rule_by_rule() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let live = std::fs::read_to_string(examples("policies/api.yaml")).unwrap();
    let candidate = live
        .replacen(
            "        limit: 10\n        window: 1s",
            "        limit: 20\n        window: 1s",
            1,
        )
        .replace("  - key: tenant\n    mode: shadow\n", "  - key: tenant\n")
        + "\n  - key: device\n    limits:\n      - { name: ips, algorithm: distinct, limit: 3, window: 1h }\n";
    assert_ne!(candidate, live);
    std::fs::write(dir.join("api.yaml"), candidate).unwrap();
    // The org's tree, unchanged.
    std::fs::copy(examples("policies/org.yaml"), dir.join("org.yaml")).unwrap();
    std::fs::write(
        dir.join("other.yaml"),
        "domain: other\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 5 }\n",
    )
    .unwrap();

    let out = validate(&["--diff", dir.to_str().unwrap()], &examples("policies"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[0].starts_with("~ api: api_key#burst  burst: 10 per 1s (gcra) burst 20"),
        "{text}"
    );
    assert!(lines[0].contains("→  burst: 20 per 1s (gcra)"), "{text}");
    assert_eq!(lines[1], "+ api: device#ips  ips: 3 per 3600s (distinct)");
    assert!(
        lines[2].starts_with("~ api: tenant#tenant-hourly") && lines[2].contains("[shadow]  →"),
        "{text}"
    );
    assert_eq!(lines[3], "+ domain other");

    let out = validate(
        &["--json", "--diff", dir.to_str().unwrap()],
        &examples("policies"),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["changes"][1]["kind"], "added");
    assert_eq!(v["changes"][1]["rule"], "device#ips");

    let same = validate(
        &["--diff", examples("policies").to_str().unwrap()],
        &examples("policies"),
    );
    assert_eq!(
        String::from_utf8(same.stdout).unwrap().trim(),
        "no rule changes"
    );

    std::fs::write(dir.join("broken.yaml"), "domain: [\n").unwrap();
    let out = validate(&["--diff", dir.to_str().unwrap()], &examples("policies"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.yaml"));
}

/// `validate` loads as `serve` would: MERGE_DOMAIN_CONFIG (or `merge_domains:` in a
/// settings file) merges files of one domain here too, and it says so.
#[test]
fn validate_reads_the_settings_serve_reads() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("validate-merge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, key) in [("a.yaml", "user"), ("b.yaml", "tenant")] {
        std::fs::write(
            dir.join(file),
            format!("domain: shared\ndescriptors:\n  - key: {key}\n    rate_limit: {{ unit: minute, requests_per_unit: 5 }}\n"),
        )
        .unwrap();
    }
    let run = |env: &[(&str, &str)], args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .arg("validate")
            .args(args)
            .arg(&dir)
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    assert_eq!(
        run(&[], &[]).status.code(),
        Some(1),
        "one domain, two files"
    );
    let out = run(&[("MERGE_DOMAIN_CONFIG", "true")], &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("merge_domains on"),
        "{out:?}"
    );
    let settings = dir.join("settings.yml.txt");
    std::fs::write(&settings, "merge_domains: true\n").unwrap();
    let out = run(&[], &["--settings", settings.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A bulk file of overrides, checked as the service's import checks it: each fault with
/// its file and line; a domain the policies lack refused.
#[test]
fn a_bulk_file_of_overrides_is_checked_line_by_line() {
    let file = examples("overrides/customers.ndjson");
    let args = ["--overrides", file.to_str().unwrap(), "--domain", "api"];
    let out = validate(&args, &examples("policies"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("3 overrides of domain api, every one valid"),
        "{text}"
    );

    let broken = examples("overrides/broken.ndjson");
    let args = ["--overrides", broken.to_str().unwrap(), "--domain", "api"];
    let out = validate(&args, &examples("policies"));
    assert_eq!(out.status.code(), Some(1));
    let errors = String::from_utf8(out.stderr).unwrap();
    for fault in [
        "broken.ndjson:1: limits[0].window: `soon` is not a duration",
        "broken.ndjson:2: entries[0].value: an override names one exact path",
        "broken.ndjson:4: entries: the same path as line 3",
        "3 faults in",
    ] {
        assert!(errors.contains(fault), "{fault}: {errors}");
    }
    let out = validate(&[&["--json"][..], &args].concat(), &examples("policies"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["valid"].as_bool(), v["errors"][2]["line"].as_u64()),
        (Some(false), Some(4))
    );

    let args = ["--overrides", file.to_str().unwrap(), "--domain", "nowhere"];
    let out = validate(&args, &examples("policies"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("no domain nowhere")
    );
}
