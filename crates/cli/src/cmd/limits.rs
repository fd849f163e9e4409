//! `spillway limits`: overrides on a running service (`/v1/limits/{domain}` on its admin
//! listener): a path's own limits set, read, listed, removed, and its history.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use spillway_policy::duration;

pub const EXAMPLES: &str = "\
Examples:
  # api_key=abc's own limits, ahead of the policy file's, on every replica
  spillway limits set --domain api api_key=abc \\
    --limits '[{\"name\": \"per-minute\", \"algorithm\": \"gcra\", \"limit\": 1000, \"window\": \"1m\"}]'

  # The same from a file of JSON
  spillway limits set --domain api api_key=abc --limits-file plan-pro.json

  # Read one, list those of a prefix, see a path's changes, remove one
  spillway limits get --domain api api_key=abc
  spillway limits list --domain api --prefix api_key=ab
  spillway limits history --domain api api_key=abc
  spillway limits delete --domain api api_key=abc

  # A service whose admin listener has a token (admin_token_file)
  SPILLWAY_ADMIN_TOKEN=... spillway limits list --domain api

Exit status: 0 done, 1 no such override (get, delete), 2 an error.";

#[derive(Debug, clap::Args)]
pub struct LimitsArgs {
    #[command(subcommand)]
    pub action: Action,

    /// The service's admin listener (http:// or https://).
    #[arg(long, global = true, default_value = "http://127.0.0.1:6070")]
    pub server: String,

    /// Print the service's answer as JSON.
    #[arg(long, global = true)]
    pub json: bool,

    /// Give up after this long.
    #[arg(long, global = true, default_value = "5s", value_parser = duration::parse)]
    pub timeout: Duration,

    #[command(flatten)]
    pub token: crate::args::AdminToken,

    #[command(flatten)]
    pub tls: crate::args::ClientTls,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Set a path's limits (replacing its override, if it has one).
    Set {
        #[command(flatten)]
        path: PathArgs,
        /// The limits, a JSON list in the policy's native form.
        #[arg(
            long,
            conflicts_with = "limits_file",
            required_unless_present = "limits_file"
        )]
        limits: Option<String>,
        /// A file holding the limits' JSON list.
        #[arg(long)]
        limits_file: Option<std::path::PathBuf>,
    },
    /// Print a path's override.
    Get {
        #[command(flatten)]
        path: PathArgs,
    },
    /// List a domain's overrides, a page at a time.
    List {
        /// The policy domain.
        #[arg(long)]
        domain: String,
        /// Only paths whose text (`key=value/key=value`) starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// The page after this path (the `next` a page ends with).
        #[arg(long)]
        after: Option<String>,
        /// The most in a page (at most 1000).
        #[arg(long, default_value = "100")]
        limit: usize,
    },
    /// Remove a path's override: the policy file's rules apply to it again.
    Delete {
        #[command(flatten)]
        path: PathArgs,
    },
    /// Print a path's last changes: who, when, before and after.
    History {
        #[command(flatten)]
        path: PathArgs,
    },
}

#[derive(Debug, clap::Args)]
pub struct PathArgs {
    /// The policy domain.
    #[arg(long)]
    pub domain: String,
    /// The path's entries, `key=value`, in order.
    #[arg(required = true)]
    pub entries: Vec<String>,
}

impl PathArgs {
    /// `?entry=key=value&…`, encoded.
    fn query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for e in &self.entries {
            q.append_pair("entry", e);
        }
        q.finish()
    }
}

pub fn run(args: LimitsArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(act(&args))
}

async fn act(args: &LimitsArgs) -> anyhow::Result<ExitCode> {
    use hyper::Method;
    let (method, path, body) = match &args.action {
        Action::Set {
            path,
            limits,
            limits_file,
        } => {
            let text = match (limits, limits_file) {
                (Some(l), _) => l.clone(),
                (None, Some(f)) => std::fs::read_to_string(f)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?,
                (None, None) => unreachable!("clap requires one"),
            };
            let limits: Value = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("--limits is not JSON: {e}"))?;
            let entries: Vec<Value> = super::entries(&path.entries)
                .into_iter()
                .map(|(k, v)| serde_json::json!({ "key": k, "value": v }))
                .collect();
            let body = serde_json::json!({ "entries": entries, "limits": limits });
            (
                Method::PUT,
                format!("/v1/limits/{}", encode(&path.domain)),
                Some(body),
            )
        }
        Action::Get { path } => (
            Method::GET,
            format!("/v1/limits/{}?{}", encode(&path.domain), path.query()),
            None,
        ),
        Action::Delete { path } => (
            Method::DELETE,
            format!("/v1/limits/{}?{}", encode(&path.domain), path.query()),
            None,
        ),
        Action::History { path } => (
            Method::GET,
            format!(
                "/v1/limits/{}/history?{}",
                encode(&path.domain),
                path.query()
            ),
            None,
        ),
        Action::List {
            domain,
            prefix,
            after,
            limit,
        } => {
            let mut q = form_urlencoded::Serializer::new(String::new());
            q.append_pair("prefix", prefix);
            q.append_pair("limit", &limit.to_string());
            if let Some(a) = after {
                q.append_pair("after", a);
            }
            (
                Method::GET,
                format!("/v1/limits/{}?{}", encode(domain), q.finish()),
                None,
            )
        }
    };
    let crate::client::Server::Http { base, tls } = crate::client::Server::parse(&args.server)?
    else {
        anyhow::bail!(
            "--server `{}` is not http://host:port or https://host:port",
            args.server
        );
    };
    let client = args.tls.http_client(&base, tls)?;
    let url = format!("{base}{path}");
    let token = args.token.read()?;
    let (status, v) = crate::client::send_json(
        &client,
        method,
        &url,
        body.as_ref(),
        token.as_ref(),
        args.timeout,
    )
    .await?;
    if status == hyper::StatusCode::NOT_FOUND && v["error"]["kind"] == "no_override" {
        eprintln!("no override of that path");
        return Ok(ExitCode::from(1));
    }
    if !status.is_success() {
        let message = v["error"]["message"].as_str().unwrap_or("no message");
        let hint = match (status, token.is_some()) {
            (hyper::StatusCode::UNAUTHORIZED, false) => {
                " (give the token with --token-file FILE or SPILLWAY_ADMIN_TOKEN)"
            }
            _ => "",
        };
        anyhow::bail!("{url} answered {status}: {message}{hint}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", describe(&args.action, &v));
    }
    Ok(ExitCode::SUCCESS)
}

/// A domain as a URL path segment.
fn encode(segment: &str) -> String {
    form_urlencoded::byte_serialize(segment.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// A path's entries as `key=value key=value`.
fn path_of(record: &Value) -> String {
    record["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{}={}",
                e["key"].as_str().unwrap_or(""),
                e["value"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The answer as a person reads it.
fn describe(action: &Action, v: &Value) -> String {
    let change = |verb: &str| {
        let record = if v["after"].is_null() {
            &v["before"]
        } else {
            &v["after"]
        };
        let mut line = format!(
            "{} {}: {verb} (version {}, by {})\n",
            record["domain"].as_str().unwrap_or("?"),
            path_of(record),
            v["version"],
            v["by"].as_str().unwrap_or("?")
        );
        if !v["after"].is_null() {
            line.push_str(&format!("  limits {}\n", v["after"]["limits"]));
        }
        if !v["before"].is_null() {
            line.push_str(&format!("  was    {}\n", v["before"]["limits"]));
        }
        line
    };
    match action {
        Action::Set { .. } => change("set"),
        Action::Delete { .. } => change("removed"),
        Action::Get { .. } => format!(
            "{} {}: {}\n  version {}, by {}\n",
            v["domain"].as_str().unwrap_or("?"),
            path_of(v),
            v["limits"],
            v["version"],
            v["by"].as_str().unwrap_or("?")
        ),
        Action::List { .. } => {
            let mut out = String::new();
            for o in v["overrides"].as_array().into_iter().flatten() {
                out.push_str(&format!("{}  {}\n", path_of(o), o["limits"]));
            }
            let shown = v["overrides"].as_array().map_or(0, Vec::len);
            out.push_str(&format!("{shown} shown of {} in the domain", v["total"]));
            match v["next"].as_str() {
                Some(next) => out.push_str(&format!("; the next page: --after '{next}'\n")),
                None => out.push('\n'),
            }
            out
        }
        Action::History { .. } => {
            let mut out = String::new();
            for c in v["changes"].as_array().into_iter().flatten() {
                let what = match (c["before"].is_null(), c["after"].is_null()) {
                    (true, false) => format!("set {}", c["after"]["limits"]),
                    (false, false) => format!(
                        "changed {} -> {}",
                        c["before"]["limits"], c["after"]["limits"]
                    ),
                    _ => format!("removed {}", c["before"]["limits"]),
                };
                out.push_str(&format!(
                    "version {} at_ms {} by {}: {what}\n",
                    c["version"],
                    c["at_ms"],
                    c["by"].as_str().unwrap_or("?")
                ));
            }
            if out.is_empty() {
                out.push_str("no changes of that path among the last kept\n");
            }
            out
        }
    }
}
