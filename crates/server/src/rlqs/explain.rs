//! `/v1/rlqs/explain`: a bucket's rule, and what each Envoy holding it asked for and
//! was given (in this process, or every replica's through Redis).

use std::sync::Arc;

use spillway_core::Timestamp;

use super::Quotas;
use super::buckets::{BucketKey, Pairs, Rulebook, Verdict, verdict};

impl Quotas {
    /// What `/v1/rlqs/explain` shows of the bucket `pairs` of `domain` at `now`: its
    /// rule (or the pairs it did not match), and each holder's demand and booked share
    /// (every replica's, when the shares live in Redis).
    pub async fn explain(
        &self,
        domain: &str,
        pairs: Pairs,
        book: &Rulebook,
        now: Timestamp,
    ) -> Result<Explanation, spillway_core::Error> {
        let (rule, unmatched) = match verdict(book, domain, &pairs) {
            Verdict::Unmatched(left) => {
                let unmatched = match left {
                    None => WhyUnmatched::Domain,
                    Some(left) if left.is_empty() => WhyUnmatched::NoRules,
                    Some(left) => WhyUnmatched::Pairs {
                        pairs: left.into_iter().collect(),
                    },
                };
                (
                    ExplainedRule::Unmatched {
                        answer: self.settings.unmatched,
                    },
                    Some(unmatched),
                )
            }
            Verdict::AllowAll => (ExplainedRule::AllowAll, None),
            Verdict::DenyAll => (ExplainedRule::DenyAll, None),
            Verdict::Rate(r) => (
                ExplainedRule::TokenBucket {
                    requests_per_second: r,
                },
                None,
            ),
        };
        let key = BucketKey {
            domain: Arc::from(domain),
            pairs,
        };
        let held = if matches!(rule, ExplainedRule::TokenBucket { .. }) {
            self.ledger.held(&key, now).await?
        } else {
            Vec::new()
        };
        let inner = self.inner.lock();
        let here = inner.buckets.get(&key);
        let holders: Vec<ExplainedHolder> = (held.into_iter())
            .map(|h| {
                let (replica, stream) = h.holder.rsplit_once(':').unwrap_or(("", ""));
                let stream: u64 = stream.parse().unwrap_or(0);
                let mine = replica == self.replica;
                let subscriber = mine.then(|| inner.streams.get(&stream)).flatten();
                let holder = (here.filter(|_| mine)).and_then(|b| b.holders.get(&stream));
                ExplainedHolder {
                    replica: replica.to_string(),
                    stream,
                    open: subscriber.map(|s| s.open),
                    sent: subscriber.map(|s| s.sent),
                    demand_per_second: h.demand,
                    booked_per_second: h.share,
                    running_per_second: holder
                        .and_then(|h| h.running)
                        .filter(|(_, until)| *until > now)
                        .map(|(share, _)| share),
                    lapses_in_ms: (h.until.duration_since(now).as_millis()) as u64,
                }
            })
            .collect();
        Ok(Explanation {
            domain: domain.to_string(),
            bucket: key.pairs.iter().cloned().collect(),
            booked_per_second: holders.iter().map(|h| h.booked_per_second).sum(),
            rule,
            unmatched,
            holders,
        })
    }
}

/// A bucket, as `/v1/rlqs/explain` shows it.
#[derive(Debug, serde::Serialize)]
pub struct Explanation {
    pub domain: String,
    pub bucket: std::collections::BTreeMap<String, String>,
    /// What its rule assigns.
    pub rule: ExplainedRule,
    /// Why no rule matched: the domain is not configured, these pairs reached no
    /// node, or the path they made has no rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unmatched: Option<WhyUnmatched>,
    /// The live bookings, added up: never more than the rule's rate (but after the
    /// rate is lowered, until each holder's next report).
    pub booked_per_second: f64,
    /// The streams that report it.
    pub holders: Vec<ExplainedHolder>,
}

/// What a bucket's rule assigns.
#[derive(Debug, serde::Serialize)]
#[serde(tag = "strategy", rename_all = "snake_case")]
pub enum ExplainedRule {
    /// No rule matches: the bucket gets what `rlqs_unmatched` says.
    Unmatched { answer: crate::config::Unmatched },
    /// Its rule is unlimited, or in shadow: every request allowed.
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
    /// Responses its Envoy took on the stream, every bucket's; `None` on another
    /// replica.
    pub sent: Option<u64>,
    /// The requests a second it last reported, allowed and denied.
    pub demand_per_second: f64,
    /// The share booked for it (what it was sent, or what its Envoy runs if more, until
    /// it has the new one), and when the booking lapses unless renewed.
    pub booked_per_second: f64,
    pub lapses_in_ms: u64,
    /// The share its Envoy runs (the last it took, while it lives); `None` on another
    /// replica, or none.
    pub running_per_second: Option<f64>,
}

/// Why a bucket matched no rule.
#[derive(Debug, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum WhyUnmatched {
    /// The domain is not configured.
    Domain,
    /// These pairs reached no node of the domain's tree.
    Pairs {
        pairs: std::collections::BTreeMap<String, String>,
    },
    /// Every pair was taken, and the path they made has no rules.
    NoRules,
}
