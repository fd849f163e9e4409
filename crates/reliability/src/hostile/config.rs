//! Broken policy files, loaded as `serve` and `validate` load them.

use std::fmt;
use std::time::Duration;

use super::count_panics;

/// A policy file that must not load, and what became of it.
#[derive(Clone, Debug)]
pub struct ConfigOutcome {
    pub class: &'static str,
    /// The load error's first line; `None` if it loaded.
    pub error: Option<String>,
    pub panicked: bool,
    pub took: Duration,
}

/// Broken policy files of every kind, each loaded from disk as `serve` and `validate`
/// load them.
pub fn config_cases() -> Vec<(&'static str, Vec<u8>)> {
    let nested = |depth: usize| -> Vec<u8> {
        let mut s = String::from("domain: d\ndescriptors: ");
        s.push_str(&"[{key: k, descriptors: ".repeat(depth));
        s.push_str("[]");
        s.push_str(&"}]".repeat(depth));
        s.into_bytes()
    };
    // Each level lists the previous one ten times: 10^9 descriptors once expanded.
    let laughs = {
        let mut s = String::from("domain: d\ndescriptors:\n  - &a0 {key: k0}\n");
        for i in 1..10 {
            let prev = vec![format!("*a{}", i - 1); 10].join(", ");
            s.push_str(&format!("  - &a{i} {{key: k{i}, descriptors: [{prev}]}}\n"));
        }
        s.into_bytes()
    };
    let rule = |r: &str| format!("domain: d\ndescriptors:\n  - key: k\n{r}").into_bytes();
    vec![
        ("empty file", Vec::new()),
        ("not YAML", b"domain: d\n  descriptors: : :\n\t- [".to_vec()),
        ("not UTF-8", b"domain: \xff\xfe\ndescriptors: []\n".to_vec()),
        ("binary garbage", (0..=255u8).cycle().take(4096).collect()),
        ("domain of the wrong type", b"domain: [1, 2]\n".to_vec()),
        ("no domain", b"descriptors: []\n".to_vec()),
        ("empty domain", b"domain: ''\n".to_vec()),
        ("unknown field", b"domain: d\nbogus: 1\n".to_vec()),
        ("duplicate key", b"domain: d\ndomain: e\n".to_vec()),
        (
            "unknown unit",
            rule("    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"),
        ),
        (
            "negative requests_per_unit",
            rule("    rate_limit: {unit: second, requests_per_unit: -1}\n"),
        ),
        (
            "requests_per_unit 2^64",
            rule("    rate_limit: {unit: second, requests_per_unit: 18446744073709551616}\n"),
        ),
        (
            "empty descriptor key",
            b"domain: d\ndescriptors:\n  - key: ''\n".to_vec(),
        ),
        (
            "unknown algorithm",
            rule("    limits:\n      - {algorithm: leaky, limit: 1, window: 1s}\n"),
        ),
        (
            "window 0",
            rule("    limits:\n      - {algorithm: gcra, limit: 1, window: 0s}\n"),
        ),
        (
            "limit 0 on sliding_log",
            rule("    limits:\n      - {algorithm: sliding_log, limit: 0, window: 1s}\n"),
        ),
        (
            "window `soon`",
            rule("    limits:\n      - {algorithm: fixed_window, limit: 1, window: soon}\n"),
        ),
        (
            "precision 0",
            rule(
                "    limits:\n      - {algorithm: sliding_window, limit: 1, window: 1s, precision: 0}\n",
            ),
        ),
        (
            "both rate_limit and limits",
            rule(
                "    rate_limit: {unit: second, requests_per_unit: 1}\n    limits:\n      - {algorithm: gcra, limit: 1, window: 1s}\n",
            ),
        ),
        ("descriptors nested 10,000 deep", nested(10_000)),
        (
            "a billion laughs (aliases expanding to 10^9 descriptors)",
            laughs,
        ),
    ]
}

/// Loads every [`config_cases`] file from a scratch directory.
pub fn run_config() -> anyhow::Result<Vec<ConfigOutcome>> {
    count_panics();
    let dir = std::env::temp_dir().join(format!("spillway-hostile-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut outcomes = Vec::new();
    for (class, bytes) in config_cases() {
        let file = dir.join("p.yaml");
        std::fs::write(&file, bytes)?;
        #[allow(clippy::disallowed_methods, reason = "timing a blocking load")]
        let started = std::time::Instant::now();
        let loaded = std::panic::catch_unwind(|| spillway_policy::load(&file));
        outcomes.push(ConfigOutcome {
            class,
            error: match &loaded {
                Ok(Err(e)) => Some(
                    e.to_string()
                        .lines()
                        .next()
                        .unwrap_or("")
                        .replace(&format!("{}/", dir.display()), ""),
                ),
                _ => None,
            },
            panicked: loaded.is_err(),
            took: started.elapsed(),
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(outcomes)
}

impl ConfigOutcome {
    /// Refused with an error, no panic, within a second.
    pub fn ok(&self) -> bool {
        self.error.is_some() && !self.panicked && self.took < Duration::from_secs(1)
    }
}

impl fmt::Display for ConfigOutcome {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error = match (&self.error, self.panicked) {
            (_, true) => "**panicked**".to_string(),
            (None, _) => "**loaded**".to_string(),
            (Some(e), _) => {
                let mut short: String = e.chars().take(100).collect();
                if short.len() < e.len() {
                    short.push('…');
                }
                format!("`{}`", short.replace('`', "'").replace('|', "\\|"))
            }
        };
        write!(
            f,
            "| {} | {error} | {:.1} | {} |",
            self.class,
            self.took.as_secs_f64() * 1e3,
            if self.ok() { "yes" } else { "**no**" }
        )
    }
}

/// The table's header, for [`ConfigOutcome`]'s rows.
pub const CONFIG_HEADER: &str = "| policy file | load error | ms | as it must |\n|---|---|---|---|";
