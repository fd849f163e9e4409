//! `spillway config`: the configuration `serve` would run with, from the same flags,
//! settings file and environment, each value with where it came from (secrets masked);
//! or, with `--reference`, a reference page generated from the code.

use std::process::ExitCode;

use spillway_server::config::{self, Kind, Origin, Profile};

use super::serve::{ServeArgs, environment};

pub const EXAMPLES: &str = "\
Examples:
  # What serve would run with here, and where each value comes from
  spillway config --settings spillway.yaml --store redis://10.0.0.5:6379

  # Only what is not a default
  REDIS_URL=redis:6379 REDIS_SOCKET_TYPE=tcp spillway config --changed

  # The reference pages, generated from the code
  spillway config --reference settings > docs/reference/settings.md
  spillway config --reference metrics > docs/reference/metrics.md
  spillway config --reference api > docs/reference/api.md
  spillway config --reference migration   # docs/envoy.md's table of the reference's variables";

/// A reference page.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Page {
    Settings,
    Metrics,
    Api,
    /// docs/envoy.md's table of the reference's variables.
    Migration,
}

#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// Print a reference page generated from the code instead (settings, metrics, api,
    /// or migration: docs/envoy.md's table of the reference's variables).
    #[arg(long, value_name = "PAGE")]
    pub reference: Option<Page>,

    /// Show only the settings that are not at their default.
    #[arg(long)]
    pub changed: bool,

    #[command(flatten)]
    pub serve: ServeArgs,
}

pub fn run(args: ConfigArgs) -> anyhow::Result<ExitCode> {
    match args.reference {
        Some(Page::Settings) => {
            print!("{}", config::reference_page());
            return Ok(ExitCode::SUCCESS);
        }
        Some(Page::Metrics) => {
            print!("{}", spillway_server::metrics::reference_page());
            return Ok(ExitCode::SUCCESS);
        }
        Some(Page::Api) => {
            print!("{}", spillway_server::openapi::reference_page());
            return Ok(ExitCode::SUCCESS);
        }
        Some(Page::Migration) => {
            print!("{}", config::migration_table());
            return Ok(ExitCode::SUCCESS);
        }
        None => {}
    }
    let resolved = args.serve.resolve()?;
    println!(
        "# {}",
        match resolved.profile {
            Profile::Native => "Spillway's defaults (no reference variable is set)",
            Profile::Reference =>
                "the reference's defaults (started as ratelimit, or its variables are set)",
        }
    );
    let rows: Vec<(&str, String, String)> = resolved
        .given
        .iter()
        .filter(|(_, g)| {
            !args.changed || !matches!(g.origin, Origin::Default | Origin::ReferenceDefault)
        })
        .map(|(s, g)| {
            (
                s.name,
                shown(s.kind, s.name, &g.value),
                g.origin.to_string(),
            )
        })
        .collect();
    let width = |f: fn(&(&str, String, String)) -> usize| rows.iter().map(f).max().unwrap_or(0);
    let (w0, w1) = (width(|r| r.0.len()), width(|r| r.1.len()).min(48));
    for (name, value, origin) in &rows {
        println!("{name:w0$}  {value:w1$}  {origin}");
    }
    for (variable, why) in config::not_honoured(&environment()) {
        println!("# not honoured: {variable}: {why}");
    }
    if let Err(e) = resolved.config.tls_files() {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// A value as it may be printed: a secret as `***`, a URL's password as `***`; empty
/// as `-`.
fn shown(kind: Kind, name: &str, value: &str) -> String {
    if value.is_empty() {
        return "-".into();
    }
    if kind == Kind::Secret {
        return "***".into();
    }
    if name == "store" {
        return spillway_redis::redact_url(value);
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_passwords_in_urls_are_masked() {
        assert_eq!(
            shown(Kind::Text, "store", "unix:///r.sock?pass=pw"),
            "unix:///r.sock?pass=***"
        );
        assert_eq!(shown(Kind::Secret, "redis_password", "pw"), "***");
    }
}
