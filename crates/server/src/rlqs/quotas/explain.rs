//! `/v1/rlqs/explain`: a bucket's rule, and what each Envoy holding it asked for and
//! was given (in this process, or every replica's through Redis).

use std::sync::Arc;

use spillway_policy::PolicySet;

use super::{BucketKey, Quotas, Verdict, verdict};

impl Quotas {
    /// What `/v1/rlqs/explain` shows of the bucket `pairs` of `domain` at `now` (µs):
    /// its rule, and each holder's demand and share (every replica's, when the shares
    /// live in Redis).
    pub async fn explain(
        &self,
        domain: &str,
        pairs: Box<[(String, String)]>,
        policies: &PolicySet,
        now: u64,
    ) -> Result<Explanation, spillway_core::Error> {
        let rule = match verdict(policies, domain, &pairs) {
            Verdict::AllowAll => ExplainedRule::AllowAll,
            Verdict::DenyAll => ExplainedRule::DenyAll,
            Verdict::Rate(r) => ExplainedRule::TokenBucket {
                requests_per_second: r,
            },
        };
        let key = BucketKey {
            domain: Arc::from(domain),
            pairs,
        };
        // Only a rated bucket's shares live in Redis.
        let mut holders = match &self.shared {
            Some(redis) if matches!(rule, ExplainedRule::TokenBucket { .. }) => {
                let held = redis
                    .shares_held(&redis.quota_key(domain, &key.pairs), now)
                    .await?;
                let inner = self.inner.lock();
                held.into_iter()
                    .map(|h| {
                        let (replica, stream) = h.holder.rsplit_once(':').unwrap_or(("", ""));
                        let stream: u64 = stream.parse().unwrap_or(0);
                        let here = (replica == self.replica)
                            .then(|| inner.streams.get(&stream))
                            .flatten();
                        ExplainedHolder {
                            replica: replica.to_string(),
                            stream,
                            open: here.map(|s| s.outbox.is_some()),
                            sent: here.map(|s| s.sent),
                            demand_per_second: h.demand,
                            share_per_second: Some(h.share),
                            lapses_in_ms: Some(h.until.saturating_sub(now) / 1_000),
                        }
                    })
                    .collect()
            }
            _ => self.holders_here(&key, now),
        };
        holders.sort_by(|a, b| (&a.replica, a.stream).cmp(&(&b.replica, b.stream)));
        Ok(Explanation {
            domain: domain.to_string(),
            bucket: key.pairs.iter().cloned().collect(),
            assigned_per_second: holders.iter().filter_map(|h| h.share_per_second).sum(),
            rule,
            holders,
        })
    }

    /// The holders of `key` in this process.
    fn holders_here(&self, key: &BucketKey, now: u64) -> Vec<ExplainedHolder> {
        let inner = self.inner.lock();
        let Some(bucket) = inner.buckets.get(key) else {
            return Vec::new();
        };
        bucket
            .holders
            .iter()
            .map(|(stream, h)| {
                let subscriber = inner.streams.get(stream);
                let live = h.assigned.filter(|a| a.until > now);
                ExplainedHolder {
                    replica: self.replica.clone(),
                    stream: *stream,
                    open: Some(subscriber.is_some_and(|s| s.outbox.is_some())),
                    sent: Some(subscriber.map_or(0, |s| s.sent)),
                    demand_per_second: h.demand,
                    share_per_second: live.map(|a| a.share),
                    lapses_in_ms: live.map(|a| (a.until - now) / 1_000),
                }
            })
            .collect()
    }
}

/// A bucket, as `/v1/rlqs/explain` shows it.
#[derive(Debug, serde::Serialize)]
pub struct Explanation {
    pub domain: String,
    pub bucket: std::collections::BTreeMap<String, String>,
    /// What its rule assigns.
    pub rule: ExplainedRule,
    /// The live shares sent, added up: never more than the rule's rate.
    pub assigned_per_second: f64,
    /// The streams that report it.
    pub holders: Vec<ExplainedHolder>,
}

/// What a bucket's rule assigns.
#[derive(Debug, serde::Serialize)]
#[serde(tag = "strategy", rename_all = "snake_case")]
pub enum ExplainedRule {
    /// No rule matches, or it is unlimited or in shadow: every request allowed.
    AllowAll,
    /// A block-all rule: every request denied.
    DenyAll,
    /// Shares of this rate, as token buckets.
    TokenBucket { requests_per_second: f64 },
}

/// One stream's part of a bucket.
#[derive(Debug, serde::Serialize)]
pub struct ExplainedHolder {
    /// The replica the stream is on (random at each start).
    pub replica: String,
    /// The stream's id on it (its answers' `x-spillway-rlqs-stream` header says it to
    /// Envoy).
    pub stream: u64,
    /// Whether the stream is still open (an ended one's share counts until it lapses);
    /// `None` on another replica.
    pub open: Option<bool>,
    /// Answers sent on the stream, every bucket's; `None` on another replica.
    pub sent: Option<u64>,
    /// The requests a second it last reported, allowed and denied.
    pub demand_per_second: f64,
    /// Its live share, and when it lapses unless renewed.
    pub share_per_second: Option<f64>,
    pub lapses_in_ms: Option<u64>,
}
