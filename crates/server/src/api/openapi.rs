//! The OpenAPI 3.1 document of both HTTP listeners (`openapi.json`, kept by hand beside
//! this file and checked: schemathesis runs it against a live service in the test
//! command, `tests/it/admin.rs` holds it to the routes), served at `/openapi.json` on the
//! admin listener, and docs/reference/api.md made from it ([`reference_page`]) with the
//! gRPC side, which OpenAPI cannot describe, written out below.

use std::fmt::Write;

use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The document, as served.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// `GET /openapi.json`.
pub(super) async fn serve() -> Response {
    ([("content-type", "application/json")], DOCUMENT).into_response()
}

/// The gRPC side: Envoy's `RateLimitService` and `RateLimitQuotaService`, every field
/// Spillway reads and writes.
const GRPC: &str = "\
## gRPC: Envoy's `RateLimitService` (the gRPC port, `grpc_addr`, 8081)

`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, as Envoy calls it
(`transport_api_version: V3`), and `grpc.health.v1.Health/Check`. The messages are
Envoy's (`envoy/service/ratelimit/v3/rls.proto`, from the `envoy-types` crate); an invalid
request is `INVALID_ARGUMENT` with what is wrong, a store failure under a `closed` policy
`UNAVAILABLE`.

What Spillway reads from a `RateLimitRequest`:

| field | how it is read |
|---|---|
| `domain` | the policy domain; empty is `INVALID_ARGUMENT`, an undeclared one answers `OK` with no rule |
| `descriptors[].entries[].key`, `.value` | the path in the domain's tree, in order (1 to 32 entries, 1 to 64 descriptors, keys of at most 256 bytes; a value of any length is decided on, one over 64 bytes kept in the counter key as a prefix and its SHA-256) |
| `descriptors[].limit` (`requests_per_unit`, `unit`) | a limit instead of the configuration's, when `grpc_limit_overrides` is `allow` (the default, as the reference); `ignore` drops it, `refuse` answers `INVALID_ARGUMENT` |
| `descriptors[].hits_addend` | this descriptor's cost; 0 looks without consuming |
| `hits_addend` | every descriptor's cost; 0 or absent means 1 |

Any other field is not read.

What Spillway writes in a `RateLimitResponse`:

| field | what it holds |
|---|---|
| `overall_code` | `OK`, or `OVER_LIMIT` when an enforcing rule of any descriptor is over its limit (never `UNKNOWN`) |
| `statuses[]` | one per descriptor, in order |
| `statuses[].code` | `OK` or `OVER_LIMIT` (a shadow rule over its limit says `OK`) |
| `statuses[].current_limit` | the deciding rule: `requests_per_unit`, `unit` and `name`; absent when no rule applies |
| `statuses[].limit_remaining` | units still admitted right now (the reference's rules: 0 when over) |
| `statuses[].duration_until_reset` | until the rule's state resets, whole seconds rounded up |
| `response_headers_to_add` | the reference's three rate limit headers (`RateLimit-Limit`, `-Remaining`, `-Reset`, renamed by `reference_*_header`), when `reference_headers` is on |
| `dynamic_metadata` | the request's and the passing rules' metadata, when `dynamic_metadata` is on |

Not written: `request_headers_to_add`, `raw_body`, `quota`.

## gRPC: Envoy's `RateLimitQuotaService` (the gRPC port, `grpc_addr`, 8081)

`envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`, as
Envoy's `rate_limit_quota` filter calls it: one bidirectional stream per domain, open as
long as Envoy keeps it. The messages are Envoy's
(`envoy/service/rate_limit_quota/v3/rlqs.proto`, from the `envoy-types` crate). How buckets
map to rules and how a bucket's rate is shared: docs/envoy.md, \"Rate Limit Quota
Service\".

What Spillway reads from a `RateLimitQuotaUsageReports`:

| field | how it is read |
|---|---|
| `domain` | the policy domain of every report on the stream; empty, or another than the stream's first, ends the stream `INVALID_ARGUMENT` |
| `bucket_quota_usages[].bucket_id.bucket` | the bucket: its pairs, matched to the domain's rules in the order the policy tree asks for them (at most 16 pairs, keys and values of at most 256 bytes; a bucket past that, or past `rlqs_max_buckets` on the stream, gets no answer) |
| `bucket_quota_usages[].num_requests_allowed`, `.num_requests_denied` | the demand the bucket's Envoy reports, shared on |
| `bucket_quota_usages[].time_elapsed` | the span the counts cover (0, a new bucket's first report, counts as a second) |

A report is at most 1 MiB decoded; a larger one, or one that does not decode, ends the
stream `INVALID_ARGUMENT`. At most `rlqs_max_streams` streams are open at once, 100 on
one connection; one more is refused `RESOURCE_EXHAUSTED`. A stream has no deadline
(`grpc_request_timeout` bounds unary calls only); on shutdown every stream ends.

What Spillway writes in a `RateLimitQuotaResponse` (one or more per report, and again when
a bucket's share changes):

| field | what it holds |
|---|---|
| `bucket_action[].bucket_id` | the bucket, as reported |
| `bucket_action[].quota_assignment_action.rate_limit_strategy` | `token_bucket` (`max_tokens` = `tokens_per_fill`, a whole-second `fill_interval`) at the stream's share of the rule's rate; `blanket_rule` `ALLOW_ALL` (no rule, an unlimited one, only shadow rules) or `DENY_ALL` (a block-all rule); for a bucket no rule matches, what `rlqs_unmatched` says |
| `bucket_action[].quota_assignment_action.assignment_time_to_live` | `rlqs_assignment_ttl` (15 s), whole seconds (0 with `rlqs_expire_on_shutdown`, on shutdown) |
| `bucket_action[].abandon_action` | a bucket with no request for `rlqs_abandon_after` (5 minutes): Envoy forgets it |

The stream's response headers carry `x-spillway-rlqs-stream`, its id as
`POST /v1/rlqs/explain` shows it.
";

/// docs/reference/api.md: every operation of [`DOCUMENT`] with its request and answers,
/// then the gRPC side (`spillway config --reference api`).
pub fn reference_page() -> String {
    let doc: Value = serde_json::from_str(DOCUMENT).expect("openapi.json is JSON");
    let mut out = String::from(
        "# The API\n\n\
         Generated from the OpenAPI 3.1 document (`crates/server/src/api/openapi.json`, \
         served at `/openapi.json` on the admin listener) by `spillway config --reference \
         api`; do not edit. Schemathesis runs that document against a live service in the \
         test command (`scripts/lib/schemathesis.sh`).\n\n",
    );
    if let Some(d) = doc["info"]["description"].as_str() {
        writeln!(out, "{d}\n").unwrap();
    }
    out.push_str("## HTTP\n\n| operation | listener | what |\n|---|---|---|\n");
    let paths = doc["paths"].as_object().into_iter().flatten();
    for (path, item) in paths.clone() {
        for (method, op) in item.as_object().into_iter().flatten() {
            writeln!(
                out,
                "| [`{} {path}`](#{}) | {} | {} |",
                method.to_uppercase(),
                anchor(&format!("{} {path}", method.to_uppercase())),
                tags(op),
                op["summary"].as_str().unwrap_or("")
            )
            .unwrap();
        }
    }
    out.push('\n');
    for (path, item) in paths {
        for (method, op) in item.as_object().into_iter().flatten() {
            operation(&mut out, &format!("{} {path}", method.to_uppercase()), op);
        }
    }
    out.push_str("## Schemas\n\n");
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        writeln!(out, "### {name}\n").unwrap();
        if let Some(d) = schema["description"].as_str() {
            writeln!(out, "{d}\n").unwrap();
        }
        fields(&mut out, schema);
    }
    out.push_str(GRPC);
    out
}

fn operation(out: &mut String, title: &str, op: &Value) {
    writeln!(out, "### {title}\n").unwrap();
    writeln!(
        out,
        "{} — {}\n",
        tags(op),
        op["description"].as_str().unwrap_or("")
    )
    .unwrap();
    for p in op["parameters"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "Parameter `{}` (in {}{}).\n",
            p["name"].as_str().unwrap_or(""),
            p["in"].as_str().unwrap_or(""),
            if p["required"].as_bool() == Some(true) {
                ", required"
            } else {
                ""
            }
        )
        .unwrap();
    }
    if let Some(body) = op["requestBody"]["content"]["application/json"]["schema"].as_object() {
        writeln!(
            out,
            "Request body: {}.\n",
            type_of(&Value::Object(body.clone()))
        )
        .unwrap();
    }
    out.push_str("| status | answer |\n|---|---|\n");
    for (status, r) in op["responses"].as_object().into_iter().flatten() {
        let body = r["content"]
            .as_object()
            .and_then(|c| c.iter().next())
            .map(|(ctype, c)| format!(" ({ctype}: {})", type_of(&c["schema"])))
            .unwrap_or_default();
        let desc = r["description"].as_str().unwrap_or("");
        writeln!(out, "| {status} | {desc}{body} |").unwrap();
    }
    out.push('\n');
}

/// A schema's fields as a table: name, type, whether required, what it holds.
fn fields(out: &mut String, schema: &Value) {
    let Some(props) = schema["properties"].as_object() else {
        return;
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    out.push_str("| field | type | required | what |\n|---|---|---|---|\n");
    for (name, p) in props {
        writeln!(
            out,
            "| `{name}` | {} | {} | {} |",
            type_of(p),
            if required.contains(&name.as_str()) {
                "yes"
            } else {
                ""
            },
            p["description"].as_str().unwrap_or("").replace('|', "\\|")
        )
        .unwrap();
    }
    out.push('\n');
}

/// A schema's type in a few words: a reference's name, `T or null`, an enum's values.
fn type_of(s: &Value) -> String {
    if let Some(r) = s["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("[{name}](#{})", anchor(name));
    }
    if let Some(any) = s["oneOf"].as_array() {
        return any.iter().map(type_of).collect::<Vec<_>>().join(" or ");
    }
    if let Some(values) = s["enum"].as_array() {
        let shown: Vec<String> = values
            .iter()
            .map(|v| match v {
                Value::Null => "null".to_owned(),
                v => format!("`{}`", v.as_str().unwrap_or("?")),
            })
            .collect();
        return shown.join(", ");
    }
    let kind = match &s["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    };
    if kind == "array" {
        return format!("array of {}", type_of(&s["items"]));
    }
    kind
}

fn tags(op: &Value) -> String {
    op["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The anchor GitHub makes of a heading.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}
