//! `spillway explain`: why a running service would admit or limit a request, without
//! consuming anything (`POST /v1/explain`), printed for a person or as JSON.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;
use spillway_policy::duration;

pub const EXAMPLES: &str = "\
Examples:
  # Which rules apply to api_key=k1, what their counters hold, and whether a check would pass
  spillway explain --server http://127.0.0.1:6070 --domain api api_key=k1

  # A descriptor of two entries, a request of cost 5, as JSON
  spillway explain --server http://127.0.0.1:6070 --domain api --cost 5 --json api_key=k1 route=upload

  # A service whose admin listener has a token (admin_token_file)
  spillway explain --token-file /run/secrets/spillway-admin --domain api api_key=k1
  SPILLWAY_ADMIN_TOKEN=... spillway explain --domain api api_key=k1

Exit status: 0 a check would be admitted, 1 it would be limited, 2 an error.";

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The descriptor's entries, `key=value` (or `key` for an empty value), in order.
    #[arg(required = true)]
    pub entries: Vec<String>,

    /// The service's admin listener (http:// or https://).
    #[arg(long, default_value = "http://127.0.0.1:6070")]
    pub server: String,

    /// The policy domain.
    #[arg(long)]
    pub domain: String,

    /// The cost a check would charge.
    #[arg(long, default_value = "1")]
    pub cost: u64,

    /// Print the service's answer as JSON.
    #[arg(long)]
    pub json: bool,

    /// Give up after this long.
    #[arg(long, default_value = "5s", value_parser = duration::parse)]
    pub timeout: Duration,

    #[command(flatten)]
    pub token: crate::args::AdminToken,

    #[command(flatten)]
    pub tls: crate::args::ClientTls,
}

pub fn run(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let v = runtime.block_on(ask(&args))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", describe(&v));
    }
    Ok(if v["allowed"].as_bool() == Some(true) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn ask(args: &ExplainArgs) -> anyhow::Result<Value> {
    let body = super::descriptor_body(&args.domain, &super::entries(&args.entries), args.cost);
    let token = args.token.read()?;
    // `/v1/explain` answers 200 whatever the verdict.
    super::post_descriptor(
        &args.server,
        &args.tls,
        token.as_ref(),
        "/v1/explain",
        &body,
        args.timeout,
    )
    .await
}

/// The explanation as a person reads it: the verdict, then per descriptor its path and
/// each limit with its counter.
pub fn describe(v: &Value) -> String {
    let mut out = String::new();
    let domain = v["domain"].as_str().unwrap_or("?");
    match (v["allowed"].as_bool(), v["denied_by"].as_object()) {
        (Some(true), _) => out.push_str(&format!("domain {domain}: a check would be ADMITTED\n")),
        (_, Some(d)) => out.push_str(&format!(
            "domain {domain}: a check would be LIMITED by `{}` (descriptor {})\n",
            d["rule"].as_str().unwrap_or("?"),
            d["descriptor"]
        )),
        _ => out.push_str(&format!("domain {domain}: a check would be LIMITED\n")),
    }
    for (i, d) in v["descriptors"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let entries: Vec<String> = d["entries"]
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
            .collect();
        out.push_str(&format!("\ndescriptor {i}: {}\n", entries.join(" ")));
        for step in d["path"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  entry {} → node `{}` ({})\n",
                step["entry"],
                step["node"].as_str().unwrap_or(""),
                step["matched_by"].as_str().unwrap_or("")
            ));
        }
        if d["override_limit"].as_bool() == Some(true) {
            out.push_str("  Envoy's own limit for this descriptor, instead of the configuration\n");
        }
        if let Some(why) = d["unmatched"].as_str() {
            out.push_str(&format!("  no limit applies: {why}\n"));
        }
        for l in d["limits"].as_array().into_iter().flatten() {
            out.push_str(&format!("  {}\n", limit_line(l)));
        }
    }
    out
}

/// A request's place in a `shares` tree: how it would go, and what is left.
fn share_place(place: &serde_json::Map<String, Value>) -> String {
    let ms = |k: &str| Duration::from_millis(place[k].as_u64().unwrap_or(0));
    let how = match place["path"].as_str() {
        Some("borrowed") if ms("wait_ms").is_zero() => "borrows now".to_owned(),
        Some("borrowed") => format!("borrows after {}", duration::format(ms("wait_ms"))),
        Some("refused") => format!("refused for {}", duration::format(ms("retry_after_ms"))),
        Some(path) => path.to_owned(),
        None => "?".to_owned(),
    };
    let fair = match place["fair"].as_bool() {
        Some(true) => " within its fair share",
        Some(false) => " past its fair share",
        None => "",
    };
    format!(
        "{how}{fair} ({} guaranteed, {} borrowable, {} of the parent left)",
        place["guaranteed_left"], place["borrowable_left"], place["parent_left"]
    )
}

fn limit_line(l: &Value) -> String {
    let rule = l["rule"].as_str().unwrap_or("?");
    let algorithm = l["algorithm"].as_str().unwrap_or("?");
    let mut line = match (l["limit"].as_u64(), l["window_ms"].as_u64()) {
        (Some(n), Some(w)) => format!(
            "`{rule}`: {algorithm} {n} per {}",
            duration::format(Duration::from_millis(w))
        ),
        _ => format!("`{rule}`: {algorithm}"),
    };
    if let Some(by) = l["replaced_by"].as_str() {
        return format!("{line} — replaced by `{by}`, not counted");
    }
    if let Some(share) = l["share"].as_object() {
        // A shares rule: the child and priority the request is decided as.
        line.push_str(&format!(
            ", as `{}` (guaranteed {}, ceiling {}, weight {}, burst {}{})",
            share["child"].as_str().unwrap_or("?"),
            share["rate"],
            share["ceil"],
            share["weight"],
            share["burst"],
            match share["priority"].as_str() {
                Some(p) => format!(", priority {p}"),
                None => String::new(),
            }
        ));
        if let Some(place) = share["place"].as_object() {
            line.push_str(&format!(", {}", share_place(place)));
        }
    }
    if let Some(s) = l["state"].as_object() {
        line.push_str(&format!(
            ", {} left, idle in {}",
            s["remaining"],
            duration::format(Duration::from_millis(
                s["reset_after_ms"].as_u64().unwrap_or(0)
            ))
        ));
    }
    if let Some(e) = l["error"].as_str() {
        line.push_str(&format!(", {e}"));
    }
    let verdict = if l["would_admit"].as_bool() == Some(true) {
        "admits"
    } else {
        "would deny"
    };
    line.push_str(&format!(
        " → {verdict} (cost {}; {}, on store error {}{}{})",
        l["cost"],
        l["mode"].as_str().unwrap_or("?"),
        l["on_store_error"].as_str().unwrap_or("?"),
        if l["quota_mode"].as_bool() == Some(true) {
            ", quota mode"
        } else {
            ""
        },
        match l["sharing"].as_str() {
            Some("exact") | None => String::new(),
            Some(s) => format!(", {s}"),
        }
    ));
    line
}
