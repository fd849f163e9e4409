//! The Rate Limit Quota Service's handling of a usage report decoded from arbitrary
//! bytes, as its stream decodes them (`prost`): two streams report it a second apart,
//! the first breaks and its Envoy comes back on a third (taking over its shares), which
//! reports twice, its Envoy taking each answer; then the buckets expire. Never a panic;
//! every answer names a bucket the report named; a report that is refused says why.

#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use spillway_core::Timestamp;
use spillway_server::config::Unmatched;
use spillway_server::rlqs::{MemoryLedger, Pairs, Quotas, Refusal, Rulebook, Settings};

/// A rated bucket, an unlimited one and a blocked one, in domain `quota`.
static POLICIES: LazyLock<Rulebook> = LazyLock::new(|| {
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
    let set = spillway_policy::assemble([domain]).expect("the policy assembles");
    Rulebook::of_policies(std::sync::Arc::new(set))
});

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
});

/// 2027-01-15.
const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

fuzz_target!(|data: &[u8]| {
    let Ok(report) = RateLimitQuotaUsageReports::decode(data) else {
        return;
    };
    let report = spillway_server::decode::rlqs_report(report);
    RUNTIME.block_on(async {
        let settings = Settings {
            ttl: Duration::from_secs(15),
            abandon_after: Duration::from_secs(300),
            max_buckets: 1000,
            expire_on_shutdown: false,
            max_streams: 16,
            unmatched: Unmatched::Allow,
            store_timeout: Duration::from_secs(1),
        };
        let quotas = Quotas::new(settings, Box::new(MemoryLedger::default()));
        let peer = Some(std::net::IpAddr::from([127, 0, 0, 1]));
        let (a, _) = quotas.open(peer).expect("room for a stream");
        let (b, _) = quotas.open(None).expect("room for a stream");
        let named: Vec<Pairs> = (report.usages.iter())
            .filter_map(|u| u.bucket.clone())
            .map(sorted)
            .collect();
        let mut c_stream = None;
        for step in 0..4u64 {
            let now = T0.saturating_add(Duration::from_secs(step));
            // `a` breaks and its Envoy comes back as `c`, taking over its shares.
            let stream = match step {
                0 => a,
                1 => b,
                _ => *c_stream.get_or_insert_with(|| {
                    quotas.close(a);
                    quotas.open(peer).expect("room for a stream").0
                }),
            };
            if let Err(refusal) = quotas.report(stream, report.clone(), &POLICIES, now).await {
                let Refusal::Invalid(why) = refusal else {
                    panic!("{refusal:?}")
                };
                assert!(!why.is_empty(), "a refusal that says nothing");
            }
            // Its Envoy takes the answers: each names a bucket the report named.
            let (answers, settling) = quotas.deliver(stream, now);
            for answer in answers {
                let bucket = sorted(Pairs::clone(&answer.bucket));
                assert!(
                    named.contains(&bucket),
                    "an answer for a bucket nobody reported"
                );
            }
            quotas.settle(settling, now).await;
        }
        quotas.close(b);
        quotas.close(c_stream.expect("opened"));
        quotas.expire(T0.saturating_add(Duration::from_secs(3600)));
    });
});

fn sorted(pairs: Pairs) -> Pairs {
    let mut pairs = pairs.into_vec();
    pairs.sort();
    pairs.into_boxed_slice()
}
