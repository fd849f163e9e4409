//! The Rate Limit Quota Service's handling of a usage report decoded from arbitrary
//! bytes, as its stream decodes them (`prost`): two streams report it a second apart,
//! the first breaks and its Envoy comes back on a third (taking over its shares), which
//! reports twice; then the buckets expire. Never a panic; every answer names a bucket
//! the report named (its pairs, or their digests); a report that is refused says why.

#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use spillway_server::rlqs::{Quotas, Settings};

/// A rated bucket, an unlimited one and a blocked one, in domain `quota`.
static POLICIES: LazyLock<spillway_policy::PolicySet> = LazyLock::new(|| {
    let domain = spillway_policy::parse(
        "quota.yaml",
        "domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: free
    rate_limit: { unlimited: true }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
",
    )
    .expect("the policy parses");
    spillway_policy::assemble([domain]).expect("the policy assembles")
});

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
});

/// 2027-01-15, in µs.
const T0: u64 = 1_800_000_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Ok(report) = RateLimitQuotaUsageReports::decode(data) else {
        return;
    };
    RUNTIME.block_on(async {
        let quotas = Quotas::new(Settings {
            ttl: Duration::from_secs(15),
            abandon_after: Duration::from_secs(300),
            max_buckets: 1000,
            expire_on_shutdown: false,
        });
        let (outbox, mut answers) = tokio::sync::mpsc::channel(64);
        let peer = Some(std::net::IpAddr::from([127, 0, 0, 1]));
        let a = quotas.open(outbox.clone(), peer);
        let b = quotas.open(outbox.clone(), None);
        // `a` breaks and its Envoy comes back as `c`, taking over its shares.
        let c = || quotas.open(outbox.clone(), peer);
        let mut c_stream = None;
        for (step, now) in [T0, T0 + 1_000_000, T0 + 2_000_000, T0 + 3_000_000]
            .into_iter()
            .enumerate()
        {
            let stream = match step {
                0 => a,
                1 => b,
                _ => *c_stream.get_or_insert_with(|| {
                    quotas.close(a);
                    c()
                }),
            };
            if let Err(status) = quotas.report(stream, report.clone(), &POLICIES, now).await {
                assert!(!status.message().is_empty(), "a refusal that says nothing");
            }
        }
        quotas.close(b);
        quotas.close(c_stream.expect("opened"));
        quotas.expire(T0 + 3_600_000_000);
        let named: Vec<_> = (report.bucket_quota_usages.iter())
            .filter_map(|u| u.bucket_id.as_ref())
            .collect();
        while let Ok(answer) = answers.try_recv() {
            let Ok(answer) = answer else { continue };
            for action in answer.bucket_action {
                let id = action.bucket_id.expect("an answer names its bucket");
                assert!(
                    named.contains(&&id),
                    "an answer for a bucket nobody reported"
                );
            }
        }
    });
});
