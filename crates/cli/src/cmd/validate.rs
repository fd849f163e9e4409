//! `spillway validate`: loads policy files through the same code as `serve` and says
//! whether they would load — every error with its file, line and field, or what the
//! files define. For CI before a deploy.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};
use spillway_policy::{Mode, Rule, RuleLimit};

pub const EXAMPLES: &str = "\
Exit status: 0 every file is valid, 1 a file has errors (each printed as
FILE:LINE: FIELD: MESSAGE on stderr), 2 the command itself could not run.

Examples:
  # Check a policy directory before deploying it
  spillway validate /etc/spillway/policies

  # In CI, as JSON
  spillway validate --json policies/ > validation.json";

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// A policy file, or a directory of them (one domain per file).
    pub path: PathBuf,

    /// Print JSON: {"valid": true, "domains": [...]} or {"valid": false, "errors": [...]}.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let set = match spillway_policy::load(&args.path) {
        Ok(set) => set,
        Err(errors) => {
            if args.json {
                let errors: Vec<Value> = errors
                    .iter()
                    .map(|e| json!({ "file": e.file, "line": e.line, "field": e.field, "message": e.message }))
                    .collect();
                println!("{}", json!({ "valid": false, "errors": errors }));
            } else {
                for e in errors.iter() {
                    eprintln!("{e}");
                }
                eprintln!(
                    "{} error{} in {}",
                    errors.0.len(),
                    plural(errors.0.len()),
                    args.path.display()
                );
            }
            return Ok(ExitCode::from(1));
        }
    };

    let domains = set.domains();
    if args.json {
        let domains: Vec<Value> = domains
            .iter()
            .map(|d| {
                let rules: Vec<Value> = d.rules().into_iter().map(rule_json).collect();
                json!({ "domain": d.name(), "file": d.file(), "rules": rules })
            })
            .collect();
        println!("{}", json!({ "valid": true, "domains": domains }));
        return Ok(ExitCode::SUCCESS);
    }
    let rules: usize = domains.iter().map(|d| d.rule_count()).sum();
    println!(
        "{}: valid, {} domain{}, {rules} rule{}",
        args.path.display(),
        domains.len(),
        plural(domains.len()),
        plural(rules)
    );
    for d in &domains {
        println!("\n{} ({})", d.name(), d.file().display());
        for rule in d.rules() {
            println!("  {:<28} {}", rule.metric, describe(rule));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `burst: gcra 10 per 1s, burst 20 [shadow] [on_store_error: local]`.
fn describe(rule: &Rule) -> String {
    let mut out = match &rule.name {
        Some(name) => format!("{name}: "),
        None => String::new(),
    };
    out.push_str(&match &rule.limit {
        RuleLimit::Limited(l) => l.to_string(),
        RuleLimit::Unlimited => "unlimited".into(),
        RuleLimit::BlockAll => "blocks everything (requests_per_unit: 0)".into(),
    });
    if rule.reference {
        out.push_str(" (reference semantics)");
    }
    if rule.mode == Mode::Shadow {
        out.push_str(" [shadow]");
    }
    if rule.quota_mode {
        out.push_str(" [quota]");
    }
    if let Some(policy) = rule.on_store_error {
        out.push_str(&format!(" [on_store_error: {}]", policy.name()));
    }
    if !rule.replaces.is_empty() {
        let names: Vec<&str> = rule.replaces.iter().map(|n| &**n).collect();
        out.push_str(&format!(" [replaces {}]", names.join(", ")));
    }
    if rule.sharing.is_shared() {
        out.push_str(&format!(" [{}: {}]", rule.sharing, rule.sharing.bound()));
    }
    out
}

fn rule_json(rule: &Rule) -> Value {
    let (algorithm, limit, window_ms, burst) = match &rule.limit {
        RuleLimit::Limited(l) => (
            Some(l.algorithm().name()),
            Some(l.limit()),
            Some(l.window().as_millis() as u64),
            Some(l.burst()),
        ),
        _ => (None, None, None, None),
    };
    json!({
        "path": &*rule.metric,
        "name": rule.name.as_deref(),
        "kind": match rule.limit { RuleLimit::Limited(_) => "limited", RuleLimit::Unlimited => "unlimited", RuleLimit::BlockAll => "block_all" },
        "algorithm": algorithm,
        "limit": limit,
        "window_ms": window_ms,
        "burst": burst,
        "mode": if rule.mode == Mode::Shadow { "shadow" } else { "enforce" },
        "reference": rule.reference,
        "on_store_error": rule.on_store_error.map(|p| p.name()),
        "sharing": rule.sharing.to_string(),
        "bound": rule.sharing.bound(),
    })
}
