//! The docs' transcripts, checked: every ` ```console ` block in README.md and
//! docs/*.md that runs `spillway` is run and its output compared (their links:
//! `links.rs`; their figures' sources: `figures.rs`).
//!
//! A block runs as a shell session from the repository's root, each `$ ` line through
//! `sh -c` with the built `spillway` first on `PATH`. What is shown is what is compared,
//! with two wildcards, as trycmd writes them: `[..]` in a line matches any text, and a
//! line `...` any number of lines. The parts that vary are masked before comparing:
//! the addresses a block names are the test's own (the service's ports, the test Redis
//! servers: never 6379), swapped in for the run and back in the output; ANSI colours
//! and log timestamps are removed. `$ spillway serve ARGS` starts the service (on free
//! ports, `SPILLWAY_*_ADDR`; overrides kept by nothing, `SPILLWAY_OVERRIDES_FILE=off`)
//! until the block ends; the lines shown under it must be its first log lines. A block whose commands need what a test cannot give (a Redis on
//! 6379 left alone, certificates of your own) is ` ```text `, not ` ```console `.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use spillway_testkit::liar::{Liar, Lie};
use spillway_testkit::redis::{cluster_url, standalone_url, tls_standalone_url, unique_prefix};
use support::docs::{pages, root};
use support::{Procs, free_port, until_listening};

/// A console block: where it starts, and its lines.
struct Block {
    line: usize,
    lines: Vec<String>,
}

fn console_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if let Some(block) = current.as_mut() {
            if line.starts_with("```") {
                blocks.push(current.take().unwrap());
                fenced = false;
            } else {
                block.lines.push(line.to_owned());
            }
        } else if line.starts_with("```") {
            if !fenced && line.trim() == "```console" {
                current = Some(Block {
                    line: i + 1,
                    lines: Vec::new(),
                });
            } else {
                fenced = !fenced;
            }
        }
    }
    blocks
}

/// The text with ANSI escapes and each line's leading log timestamp removed.
fn plain(text: &str) -> String {
    support::plain(text)
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((stamp, rest)) if stamp.len() > 20 && stamp.ends_with('Z') => rest.trim_start(),
            _ => l,
        })
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `line` matches `pattern` (`[..]`: any text).
fn line_matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split("[..]");
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether `lines` match `expected` whole (`...`: any number of lines).
fn matches(expected: &[&str], lines: &[&str]) -> bool {
    match expected.split_first() {
        None => lines.is_empty(),
        Some((&"...", rest)) => (0..=lines.len()).any(|skip| matches(rest, &lines[skip..])),
        Some((pattern, rest)) => lines
            .split_first()
            .is_some_and(|(line, more)| line_matches(pattern, line) && matches(rest, more)),
    }
}

/// A peer answering `INFO` as Redis 6.0.16, for the page that shows it refused: started
/// once, on a thread of its own, for the test process's life.
fn old_redis_url() -> &'static str {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let liar = Liar::start_as(Lie::Nil, Some("6.0.16")).await;
                tx.send(liar.url()).unwrap();
                std::future::pending::<()>().await;
            });
        });
        rx.recv().unwrap()
    })
}

/// The addresses a block names, and the test's own in their place.
struct Swaps(Vec<(String, String)>);

impl Swaps {
    fn new(service: &Ports) -> Swaps {
        let redis = standalone_url();
        let cluster = cluster_url();
        let tls = tls_standalone_url();
        let tls_port = tls.rsplit(':').next().unwrap().to_owned();
        let mut swaps = vec![
            ("rediss://127.0.0.1:16400".to_owned(), tls.clone()),
            (
                "redis://127.0.0.1:16400".to_owned(),
                format!("redis://127.0.0.1:{tls_port}"),
            ),
            // The shared TLS servers' files: a CA, a server pair, a client pair.
            (" tls/".to_owned(), format!(" {}/", tls_dir())),
            (
                "--redis-tls-ca ca.crt".to_owned(),
                format!("--redis-tls-ca {}/ca.crt", tls_dir()),
            ),
            // Longest first: a cluster URL holds a standalone address.
            (
                "redis+cluster://127.0.0.1:7000,127.0.0.1:7001".to_owned(),
                cluster,
            ),
            ("redis://127.0.0.1:6379".to_owned(), redis),
            // A Redis too old to run on (docs/stores.md).
            (
                "redis://127.0.0.1:16401".to_owned(),
                old_redis_url().to_owned(),
            ),
        ];
        // The check ports listen on every interface, as by default (only on free ports).
        for host in ["0.0.0.0", "127.0.0.1", "localhost"] {
            swaps.push((format!("{host}:8080"), format!("{host}:{}", service.http)));
            swaps.push((format!("{host}:8081"), format!("{host}:{}", service.grpc)));
            swaps.push((format!("{host}:6070"), format!("{host}:{}", service.admin)));
        }
        Swaps(swaps)
    }

    fn to_test(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_owned(), |t, (doc, test)| t.replace(doc, test))
    }

    fn to_doc(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_owned(), |t, (doc, test)| t.replace(test, doc))
    }
}

/// Where the shared TLS servers' CA and pairs are.
fn tls_dir() -> String {
    let files = spillway_testkit::tls::shared_files();
    files.ca.parent().unwrap().display().to_string()
}

struct Ports {
    http: u16,
    grpc: u16,
    admin: u16,
}

/// A `$ ` command and the output shown under it.
struct Step {
    command: String,
    expected: Vec<String>,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in &block.lines {
        match line.strip_prefix("$ ") {
            Some(command) => steps.push(Step {
                command: command.to_owned(),
                expected: Vec::new(),
            }),
            None => {
                if let Some(step) = steps.last_mut() {
                    step.expected.push(line.trim_end().to_owned());
                }
            }
        }
    }
    for step in &mut steps {
        while step.expected.last().is_some_and(|l| l.is_empty()) {
            step.expected.pop();
        }
    }
    steps
}

/// One page's session: its addresses, and the services its blocks started (they live
/// until the page ends: a tour starts the service in one block and asks it in the next).
struct Session {
    swaps: Swaps,
    ports: Ports,
    path: String,
    prefix: String,
    /// Killed and waited for when the page ends.
    services: Procs,
}

impl Session {
    fn new(bin_dir: &Path, n: usize) -> Session {
        let ports = Ports {
            http: free_port(),
            grpc: free_port(),
            admin: free_port(),
        };
        Session {
            swaps: Swaps::new(&ports),
            ports,
            path: format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
            prefix: unique_prefix(&format!("docs-{n}")),
            services: Procs(Vec::new()),
        }
    }

    /// Runs one block; what differs, if anything.
    fn run(&mut self, page: &Path, block: &Block) -> Result<(), String> {
        let mut failures = Vec::new();
        for step in steps(block) {
            let mut command = self.swaps.to_test(&step.command);
            // Each page's counters apart from every other run's, on the shared test Redis.
            if command.starts_with("spillway check") && command.contains("--store redis") {
                let prefix = format!(" --prefix {} --store ", self.prefix);
                command = command.replacen(" --store ", &prefix, 1);
            }
            let output = if let Some(args) = command.strip_prefix("spillway serve ") {
                let (log, child) = serve(args, &self.ports, &self.path, step.expected.len());
                self.services.0.push(child);
                log
            } else {
                // One stream, in the order it was written, as a terminal shows it.
                let out = Command::new("sh")
                    .arg("-c")
                    .arg(format!("exec 2>&1; {command}"))
                    .current_dir(root())
                    // A reader's shell, not the test's: no variable of the machine's
                    // (a reference one would change `spillway config`'s answer).
                    .env_clear()
                    .env("PATH", &self.path)
                    .env("HOME", std::env::var_os("HOME").unwrap_or_default())
                    .env("NO_COLOR", "1")
                    .stdin(Stdio::null())
                    .output()
                    .expect("sh runs");
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            let actual = self.swaps.to_doc(&plain(&output));
            let actual: Vec<&str> = actual.lines().collect();
            let expected: Vec<&str> = step.expected.iter().map(String::as_str).collect();
            if !matches(&expected, &actual) {
                failures.push(format!(
                    "{}:{}: `$ {}`\n--- shown\n{}\n--- got\n{}\n",
                    page.display(),
                    block.line,
                    step.command,
                    expected.join("\n"),
                    actual.join("\n")
                ));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("\n"))
        }
    }
}

/// `spillway serve ARGS` on the block's ports: its first `lines` log lines once it
/// listens, and the process (killed when dropped).
fn serve(args: &str, ports: &Ports, path: &str, lines: usize) -> (String, std::process::Child) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("exec spillway serve {args}"))
        .current_dir(root())
        .env_clear()
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env("SPILLWAY_HTTP_ADDR", format!("0.0.0.0:{}", ports.http))
        .env("SPILLWAY_GRPC_ADDR", format!("0.0.0.0:{}", ports.grpc))
        .env("SPILLWAY_ADMIN_ADDR", format!("127.0.0.1:{}", ports.admin))
        // Overrides a tour sets are kept by nothing: a journal beside the example
        // policies would hold them for the next page's tour (a flag still wins).
        .env("SPILLWAY_OVERRIDES_FILE", "off")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spillway starts");
    let mut seen = until_listening(&mut child);
    seen.truncate(lines.max(1));
    (seen.join("\n"), child)
}

#[test]
fn every_console_transcript_runs_as_shown() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_spillway"));
    let bin_dir = bin.parent().unwrap();
    let mut failures = Vec::new();
    let mut ran = 0;
    for (n, page) in pages().into_iter().enumerate() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut session = Session::new(bin_dir, n);
        for block in console_blocks(&text) {
            if !block.lines.iter().any(|l| l.starts_with("$ spillway ")) {
                continue;
            }
            ran += 1;
            if let Err(e) = session.run(&page, &block) {
                failures.push(e);
            }
        }
    }
    assert!(ran > 0, "no console block runs spillway");
    assert!(
        failures.is_empty(),
        "{} of {ran} transcripts differ:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_matcher_has_teeth() {
    assert!(line_matches("OK: [..] remaining", "OK: 9 of 10 remaining"));
    assert!(!line_matches("OK: [..] remaining", "OVER_LIMIT: 0 of 10"));
    assert!(matches(&["a", "...", "d"], &["a", "b", "c", "d"]));
    assert!(!matches(&["a", "d"], &["a", "b", "d"]));
    assert!(!matches(&["a"], &["a", "b"]));
    assert_eq!(
        plain("\u{1b}[2m2026-11-26T23:16:56.696386Z\u{1b}[0m  INFO x"),
        "INFO x"
    );
}

/// What getting started says before any transcript: the Rust it needs is the workspace's
/// `rust-version`, its build command names the package that builds `spillway`, and its
/// list of subcommands is `spillway --help`'s, every one. (Its transcripts run above.)
#[test]
fn getting_started_states_what_the_workspace_needs() {
    let page = std::fs::read_to_string(root().join("docs/getting-started.md")).unwrap();
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("the workspace states its rust-version")
        .trim_matches('"');
    assert!(
        page.contains(&format!("**Rust {version} or newer**")),
        "getting started must ask for the workspace's Rust, {version}"
    );
    let cli = std::fs::read_to_string(root().join("crates/cli/Cargo.toml")).unwrap();
    assert!(
        cli.contains("name = \"spillway\"") && page.contains("cargo build --release -p spillway\n")
    );

    let help = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let subcommands: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(subcommands.len() >= 7, "{help}");
    let listed = page
        .split("lists the subcommands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("getting started lists the subcommands");
    for command in &subcommands {
        assert!(
            listed.contains(&format!("`{command}`")),
            "getting started's list of subcommands lacks `{command}`"
        );
    }
    for named in listed.split('`').skip(1).step_by(2) {
        assert!(
            subcommands.contains(&named),
            "getting started lists `{named}`, which spillway does not have"
        );
    }
}
