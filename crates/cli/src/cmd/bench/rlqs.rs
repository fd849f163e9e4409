//! `spillway bench --rlqs N`: N Envoy-like streams on a service's Rate Limit Quota
//! Service, each reporting every bucket (`--keys` of them: `{--key-name: k<i>}`) every
//! `--report-every`, with a random count of requests, and reading every answer as it
//! comes (its own, and the decreases another stream's report pushes to it). What it
//! says: reports and assignments a second and, with `--server-pid`, the service's CPU
//! per report and per assignment.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use rand::Rng;
use serde_json::json;
use spillway_core::{Clock, SystemClock};

use super::BenchArgs;
use super::cpu;

/// What the streams did.
#[derive(Default)]
struct Counts {
    reports: AtomicU64,
    /// Bucket actions received (assignments, blanket rules, abandons).
    actions: AtomicU64,
}

/// Runs the RLQS load `args` describe against `--server` (gRPC) with `streams` streams.
pub(super) async fn bench(args: &BenchArgs, streams: usize) -> anyhow::Result<()> {
    let url = args
        .server
        .as_deref()
        .context("--rlqs needs --server grpc://…")?;
    let domain = args.domain.clone().context("--rlqs needs --domain")?;
    let crate::client::Server::Grpc { authority, tls } = crate::client::Server::parse(url)? else {
        bail!("--rlqs speaks gRPC: --server grpc://… or grpcs://…");
    };
    let buckets: Vec<BucketId> = (0..args.keys)
        .map(|i| BucketId {
            bucket: [(args.key_name.clone(), format!("k{i}"))]
                .into_iter()
                .collect(),
        })
        .collect();
    let buckets = Arc::new(buckets);
    let counts = Arc::new(Counts::default());
    let meter = cpu::Meter::start(args.server_pid, None).await?;
    let start = SystemClock.now();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let channel = args.tls.grpc_channel(&authority, tls).await?;
        let mut client = RateLimitQuotaServiceClient::new(channel);
        let (reports, rx) = tokio::sync::mpsc::channel(4);
        let outgoing = tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(rx);
        let mut answers = client
            .stream_rate_limit_quotas(outgoing)
            .await
            .context("opening an RLQS stream")?
            .into_inner();
        let read = Arc::clone(&counts);
        tasks.push(tokio::spawn(async move {
            while let Ok(Some(answer)) = answers.message().await {
                read.actions
                    .fetch_add(answer.bucket_action.len() as u64, Ordering::Relaxed);
            }
        }));
        let (buckets, sent, domain) = (Arc::clone(&buckets), Arc::clone(&counts), domain.clone());
        let (every, duration) = (args.report_every, args.duration);
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let elapsed = PbDuration {
                seconds: every.as_secs() as i64,
                nanos: every.subsec_nanos() as i32,
            };
            while SystemClock.now().duration_since(start) < duration {
                tick.tick().await;
                let usages = {
                    let mut rng = rand::rng();
                    buckets
                        .iter()
                        .map(|id| BucketQuotaUsage {
                            bucket_id: Some(id.clone()),
                            time_elapsed: Some(elapsed),
                            num_requests_allowed: rng.random_range(0..100),
                            num_requests_denied: rng.random_range(0..20),
                        })
                        .collect()
                };
                let report = RateLimitQuotaUsageReports {
                    domain: domain.clone(),
                    bucket_quota_usages: usages,
                };
                if reports.send(report).await.is_err() {
                    return;
                }
                sent.reports.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // The writers end at the run's end, and each stream with its writer.
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    let elapsed = SystemClock.now().duration_since(start).as_secs_f64();
    let reports = counts.reports.load(Ordering::Relaxed);
    let actions = counts.actions.load(Ordering::Relaxed);
    let server = meter.finish(reports).await?.server;
    // Per assignment: the same CPU over the actions.
    let per_action = server.map(|per_report| per_report * reports as f64 / actions.max(1) as f64);
    let tenth = |x: f64| (x * 10.0).round() / 10.0;
    if args.json {
        println!(
            "{}",
            json!({
                "target": url,
                "streams": streams,
                "buckets": buckets.len(),
                "report_every_ms": args.report_every.as_millis() as u64,
                "seconds": tenth(elapsed),
                "reports": reports,
                "assignments": actions,
                "reports_per_sec": tenth(reports as f64 / elapsed),
                "assignments_per_sec": tenth(actions as f64 / elapsed),
                "server_cpu_us_per_report": server.map(tenth),
                "server_cpu_us_per_assignment": per_action.map(tenth),
            })
        );
        return Ok(());
    }
    println!(
        "RLQS against {url} (domain {domain}): {streams} streams, {} buckets each, a report every {:?}",
        buckets.len(),
        args.report_every
    );
    println!(
        "  {reports} reports ({:.1}/s), {actions} assignments ({:.1}/s) in {elapsed:.1} s",
        reports as f64 / elapsed,
        actions as f64 / elapsed
    );
    if let (Some(report), Some(action)) = (server, per_action) {
        println!(
            "  service CPU: {:.1} µs a report ({} buckets), {:.2} µs an assignment",
            report,
            buckets.len(),
            action
        );
    }
    Ok(())
}
