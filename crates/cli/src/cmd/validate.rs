//! `spillway validate`: loads policy files through the same code as `serve`, with the
//! same settings (the settings file and the reference's variables, as `serve` reads
//! them), and says whether they would load — every error with its file, line and field,
//! or what the files define. For CI before a deploy.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

pub const EXAMPLES: &str = "\
Exit status: 0 every file is valid, 1 a file has errors (each printed as
FILE:LINE: FIELD: MESSAGE on stderr), 2 the command itself could not run.

Examples:
  # Check a policy directory before deploying it
  spillway validate /etc/spillway/policies

  # What a candidate policy set changes, rule by rule
  spillway validate /etc/spillway/policies --diff candidate/

  # In CI, as JSON
  spillway validate --json policies/ > validation.json

  # A bulk file of overrides (spillway limits import) against the policies
  spillway validate /etc/spillway/policies --overrides customers.ndjson --domain api";

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// A policy file, or a directory of them (one domain per file).
    pub path: PathBuf,

    /// Print JSON: {"valid": true, "domains": [...]} or {"valid": false, "errors": [...]}.
    #[arg(long)]
    pub json: bool,

    /// Another policy file or directory: print what it changes against PATH, rule by
    /// rule (domains and rules added, removed, changed). Both must be valid.
    #[arg(long, value_name = "CANDIDATE")]
    pub diff: Option<PathBuf>,

    /// Files that declare the same domain make one domain, as `serve` does with
    /// MERGE_DOMAIN_CONFIG=true (a descriptor declared twice is still refused). Also
    /// read, as serve reads them, from --settings and MERGE_DOMAIN_CONFIG.
    #[arg(long)]
    pub merge_domains: bool,

    /// A bulk file of overrides (NDJSON, as `spillway limits import` sends it): every
    /// line checked as the service checks it, against `--domain` of these policies.
    #[arg(
        long,
        value_name = "FILE",
        requires = "domain",
        conflicts_with = "diff"
    )]
    pub overrides: Option<PathBuf>,

    /// The domain the bulk file's overrides refine.
    #[arg(long, requires = "overrides")]
    pub domain: Option<String>,

    /// A settings file, read as `serve` reads it (`merge_domains:`).
    #[arg(long, env = "SPILLWAY_SETTINGS")]
    pub settings: Option<PathBuf>,
}

/// How `serve` would load the files: the settings file, then the reference's
/// variables, then `--merge-domains`. A setting taken from the first two is said on
/// stderr, so that a file that loads here and not elsewhere is explained.
fn load_options(args: &ValidateArgs) -> anyhow::Result<spillway_policy::LoadOptions> {
    let config = spillway_server::config::Sources {
        file: args.settings.clone(),
        env: super::serve::environment(),
        ..Default::default()
    }
    .resolve()?
    .config;
    let mut options = config.load_options();
    if options.merge_domains && !args.merge_domains {
        eprintln!(
            "settings: merge_domains on (from MERGE_DOMAIN_CONFIG or the settings file), as serve would load"
        );
    }
    options.merge_domains |= args.merge_domains;
    Ok(options)
}

pub fn run(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let options = load_options(&args)?;
    let set = match load(&args.path, options, args.json) {
        Ok(set) => set,
        Err(code) => return Ok(code),
    };
    if let Some(candidate) = &args.diff {
        let candidate = match load(candidate, options, args.json) {
            Ok(set) => set,
            Err(code) => return Ok(code),
        };
        let changes = diff(&set, &candidate);
        if args.json {
            println!("{}", json!({ "valid": true, "changes": changes }));
        } else if changes.is_empty() {
            println!("no rule changes");
        } else {
            for c in &changes {
                println!("{}", change_line(c));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let (Some(file), Some(domain)) = (&args.overrides, &args.domain) {
        return overrides(file, domain, &set, args.json);
    }
    summary(&args, &set);
    Ok(ExitCode::SUCCESS)
}

/// `--overrides FILE --domain D`: each line of the bulk file checked as the service's
/// import checks it; the faults as `FILE:LINE: FIELD: MESSAGE` (or JSON), exit 1.
fn overrides(
    file: &std::path::Path,
    domain: &str,
    set: &spillway_policy::PolicySet,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    if set.domain(domain).is_none() {
        eprintln!("no domain {domain} in the policies: an override refines a domain's rules");
        return Ok(ExitCode::from(1));
    }
    let text =
        std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let mut count = 0;
    let mut faults = Vec::new();
    let part = spillway_policy::overrides::BULK_MAX_LINES;
    for (first, lines) in super::limits::parts(&text, part) {
        match spillway_policy::overrides::bulk_at(domain, &lines, first) {
            Ok(ok) => count += ok.len(),
            Err(errors) => faults.extend(errors),
        }
    }
    let name = file.display().to_string();
    if as_json {
        let errors: Vec<Value> = faults
            .iter()
            .map(|(line, e)| json!({ "file": name, "line": line, "field": e.field, "message": e.message }))
            .collect();
        println!(
            "{}",
            json!({ "valid": faults.is_empty(), "overrides": count, "errors": errors })
        );
    } else if faults.is_empty() {
        println!("{name}: {count} overrides of domain {domain}, every one valid");
    } else {
        for (line, e) in &faults {
            eprintln!("{name}:{line}: {}: {}", e.field, e.message);
        }
        eprintln!("{} faults in {name}", faults.len());
    }
    Ok(if faults.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The policy set at `path`, or (its errors printed) exit status 1.
fn load(
    path: &std::path::Path,
    options: spillway_policy::LoadOptions,
    as_json: bool,
) -> Result<spillway_policy::PolicySet, ExitCode> {
    match spillway_policy::load_with(path, options) {
        Ok(set) => Ok(set),
        Err(errors) => {
            if as_json {
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
                    path.display()
                );
            }
            Err(ExitCode::from(1))
        }
    }
}

/// What the files define.
fn summary(args: &ValidateArgs, set: &spillway_policy::PolicySet) {
    let domains = set.domains();
    if args.json {
        let domains: Vec<Value> = domains
            .iter()
            .map(|d| {
                let rules: Vec<Value> = d.rules().into_iter().map(|r| json!(r.summary())).collect();
                json!({ "domain": d.name(), "file": d.file(), "rules": rules })
            })
            .collect();
        println!("{}", json!({ "valid": true, "domains": domains }));
        return;
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
        if d.rule_count() == 0 {
            println!("  no rules: every request to this domain is admitted");
        }
        for rule in d.rules() {
            println!("  {:<28} {}", rule.metric, rule);
        }
    }
}

/// One difference between two policy sets.
#[derive(Debug, serde::Serialize)]
struct Change {
    domain: String,
    /// `domain_added`, `domain_removed`, `added`, `removed`, `changed`.
    kind: &'static str,
    /// The rule's config path and name (absent for a whole domain).
    rule: Option<String>,
    before: Option<String>,
    after: Option<String>,
}

/// The rule-level difference from `live` to `candidate`, by domain then rule.
fn diff(live: &spillway_policy::PolicySet, candidate: &spillway_policy::PolicySet) -> Vec<Change> {
    use std::collections::BTreeMap;
    let rules = |set: &spillway_policy::PolicySet, domain: &str| -> BTreeMap<String, String> {
        set.domain(domain).map_or_else(BTreeMap::new, |d| {
            d.rules()
                .into_iter()
                .map(|r| (format!("{}{}", r.metric, r.slot), r.to_string()))
                .collect()
        })
    };
    let mut names: Vec<&str> = live.domains().iter().map(|d| d.name()).collect();
    names.extend(candidate.domains().iter().map(|d| d.name()));
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::new();
    for domain in names {
        let (before, after) = (rules(live, domain), rules(candidate, domain));
        let whole = |kind| Change {
            domain: domain.to_owned(),
            kind,
            rule: None,
            before: None,
            after: None,
        };
        match (
            live.domain(domain).is_some(),
            candidate.domain(domain).is_some(),
        ) {
            (false, true) => out.push(whole("domain_added")),
            (true, false) => out.push(whole("domain_removed")),
            _ => {}
        }
        let mut ids: Vec<&String> = before.keys().chain(after.keys()).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let (b, a) = (before.get(id), after.get(id));
            let kind = match (b, a) {
                (None, Some(_)) => "added",
                (Some(_), None) => "removed",
                (Some(b), Some(a)) if b != a => "changed",
                _ => continue,
            };
            out.push(Change {
                domain: domain.to_owned(),
                kind,
                rule: Some(id.clone()),
                before: b.cloned(),
                after: a.cloned(),
            });
        }
    }
    out
}

fn change_line(c: &Change) -> String {
    let rule = c.rule.as_deref().unwrap_or("");
    match c.kind {
        "domain_added" => format!("+ domain {}", c.domain),
        "domain_removed" => format!("- domain {}", c.domain),
        "added" => format!(
            "+ {}: {rule}  {}",
            c.domain,
            c.after.as_deref().unwrap_or("")
        ),
        "removed" => format!(
            "- {}: {rule}  {}",
            c.domain,
            c.before.as_deref().unwrap_or("")
        ),
        _ => format!(
            "~ {}: {rule}  {}  →  {}",
            c.domain,
            c.before.as_deref().unwrap_or(""),
            c.after.as_deref().unwrap_or("")
        ),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
