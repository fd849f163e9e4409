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

  # 100,000 customers from a file (NDJSON, one `set` body a line: {\"entries\": [...],
  # \"limits\": [...]}): the whole file checked here first, then sent in parts
  spillway limits import --domain api customers.ndjson

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
    /// Set every override of a bulk file (NDJSON: one override a line, as `set` sends
    /// it, `{"entries": [{"key": …, "value": …}], "limits": [ … ]}`). The whole file is
    /// checked here first (nothing is sent when a line is at fault), then sent in
    /// parts, each checked and set whole by the service.
    Import {
        /// The policy domain.
        #[arg(long)]
        domain: String,
        /// The bulk file.
        file: std::path::PathBuf,
        /// Overrides a request (at most 100,000).
        #[arg(long, default_value = "10000", value_parser = clap::value_parser!(u32).range(1..=100_000))]
        part: u32,
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
        Action::Import { domain, file, part } => {
            return import(args, domain, file, *part as usize).await;
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
    let service = Service::new(args)?;
    let url = format!("{}{path}", service.base);
    let body = body.map(|b| ("application/json", b.to_string().into_bytes()));
    let (status, v) = service.send(method, &url, body).await?;
    if status == hyper::StatusCode::NOT_FOUND && v["error"]["kind"] == "no_override" {
        eprintln!("no override of that path");
        return Ok(ExitCode::from(1));
    }
    service.refused(&url, status, &v)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", describe(&args.action, &v));
    }
    Ok(ExitCode::SUCCESS)
}

/// The service's admin listener, as the arguments reach it.
struct Service {
    client: crate::client::HttpClient,
    base: String,
    token: Option<spillway_redis::Password>,
    timeout: Duration,
}

impl Service {
    fn new(args: &LimitsArgs) -> anyhow::Result<Service> {
        let crate::client::Server::Http { base, tls } = crate::client::Server::parse(&args.server)?
        else {
            anyhow::bail!(
                "--server `{}` is not http://host:port or https://host:port",
                args.server
            );
        };
        Ok(Service {
            client: args.tls.http_client(&base, tls)?,
            base,
            token: args.token.read()?,
            timeout: args.timeout,
        })
    }

    async fn send(
        &self,
        method: hyper::Method,
        url: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<(hyper::StatusCode, Value)> {
        crate::client::send(
            &self.client,
            method,
            url,
            body,
            self.token.as_ref(),
            self.timeout,
        )
        .await
    }

    /// An error saying why, unless `status` is a success.
    fn refused(&self, url: &str, status: hyper::StatusCode, v: &Value) -> anyhow::Result<()> {
        if status.is_success() {
            return Ok(());
        }
        let message = v["error"]["message"].as_str().unwrap_or("no message");
        let hint = match (status, self.token.is_some()) {
            (hyper::StatusCode::UNAUTHORIZED, false) => {
                " (give the token with --token-file FILE or SPILLWAY_ADMIN_TOKEN)"
            }
            _ => "",
        };
        anyhow::bail!("{url} answered {status}: {message}{hint}");
    }
}

/// `spillway limits import`: `file` checked whole here (its faults printed as
/// `FILE:LINE: FIELD: MESSAGE`, exit 1, nothing sent), then sent `part` lines a request.
async fn import(
    args: &LimitsArgs,
    domain: &str,
    file: &std::path::Path,
    part: usize,
) -> anyhow::Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let parts = parts(&text, part);
    let mut faults = 0;
    for (first, lines) in &parts {
        if let Err(errors) = spillway_policy::overrides::bulk_at(domain, lines, *first) {
            faults += errors.len();
            for (line, e) in errors {
                eprintln!("{}:{line}: {}: {}", file.display(), e.field, e.message);
            }
        }
    }
    if faults > 0 {
        eprintln!("{faults} faults: nothing imported");
        return Ok(ExitCode::from(1));
    }
    let service = Service::new(args)?;
    let url = format!("{}/v1/limits/{}/import", service.base, encode(domain));
    let started = tokio::time::Instant::now();
    let mut imported = 0;
    for (i, (_, lines)) in parts.iter().enumerate() {
        let body = Some(("application/x-ndjson", lines.as_bytes().to_vec()));
        let (status, v) = service.send(hyper::Method::POST, &url, body).await?;
        service.refused(&url, status, &v).map_err(|e| {
            anyhow::anyhow!(
                "{e} ({imported} imported before, in {i} parts; importing again sets the same)"
            )
        })?;
        imported += v["imported"].as_u64().unwrap_or(0);
        eprintln!("part {} of {}: {imported} imported", i + 1, parts.len());
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "domain": domain, "imported": imported })
        );
    } else {
        let n = parts.len();
        println!(
            "{imported} overrides imported to domain {domain} in {n} part{} ({:.1} s)",
            if n == 1 { "" } else { "s" },
            started.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `text` in parts of `size` overrides (blank lines aside), each with its first line.
pub(crate) fn parts(text: &str, size: usize) -> Vec<(usize, String)> {
    let mut parts = Vec::new();
    let (mut first, mut part, mut count) = (1, String::new(), 0);
    for (i, line) in text.lines().enumerate() {
        if count == size {
            parts.push((first, std::mem::take(&mut part)));
            (first, count) = (i + 1, 0);
        }
        part.push_str(line);
        part.push('\n');
        count += usize::from(!line.trim().is_empty());
    }
    if count > 0 {
        parts.push((first, part));
    }
    parts
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
        Action::Import { .. } => unreachable!("an import says what it did itself"),
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
