//! What a stream reports and is answered, in the state's own terms (the wire form is
//! `api/rlqs.rs`'s), and what a bucket's rule says for RLQS.

use std::sync::Arc;
use std::time::Duration;

use spillway_core::Mode;
use spillway_policy::{PolicySet, RuleLimit};

/// The most pairs a bucket id may have, and the most bytes of each key or value.
pub const MAX_PAIRS: usize = 16;
pub const MAX_PAIR_BYTES: usize = 256;

/// A bucket id's pairs, as Envoy sent them.
pub type Pairs = Box<[(String, String)]>;

/// One usage report of a stream.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub domain: String,
    pub usages: Vec<Usage>,
}

/// One bucket's usage since the stream's last report.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    /// The bucket id's pairs (`None`: the report named no bucket).
    pub bucket: Option<Pairs>,
    pub allowed: u64,
    pub denied: u64,
    /// Since the stream's last report of the bucket (zero at the first).
    pub elapsed: Duration,
}

/// One answer for a bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The bucket id, as Envoy sent it.
    pub bucket: Arc<Pairs>,
    pub action: Action,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// Run `strategy` for `ttl`.
    Assign { strategy: Strategy, ttl: Duration },
    /// Forget the bucket (it saw no request for `rlqs_abandon_after`).
    Abandon,
}

/// What Envoy runs for a bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    AllowAll,
    DenyAll,
    /// `tokens` every `secs` seconds, a bucket of one fill.
    TokenBucket {
        tokens: u32,
        secs: u64,
    },
}

impl Strategy {
    /// A share as Envoy 1.40's token bucket ([`spillway_core::fair_share::token_bucket`]),
    /// or DENY_ALL for one too small to write.
    pub fn share(share: f64) -> Strategy {
        match spillway_core::fair_share::token_bucket(share) {
            Some((tokens, secs)) => Strategy::TokenBucket { tokens, secs },
            None => Strategy::DenyAll,
        }
    }
}

/// A bucket: its domain and its pairs, sorted (the map has no order), a value over
/// [`MAX_PAIR_BYTES`] kept as its digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BucketKey {
    pub domain: Arc<str>,
    pub pairs: Pairs,
}

/// Pairs as a bucket keeps them, sorted: a value over [`MAX_PAIR_BYTES`] (a client's
/// header, say) kept as its digest, as descriptor values are
/// ([`spillway_policy::digested`]: refusing it would leave Envoy to its
/// `no_assignment_behavior`); `None` past [`MAX_PAIRS`] pairs or a key over
/// [`MAX_PAIR_BYTES`] (keys come from Envoy's configuration, not from clients).
pub fn bucket_pairs<'a>(pairs: impl ExactSizeIterator<Item = (&'a str, &'a str)>) -> Option<Pairs> {
    if pairs.len() > MAX_PAIRS {
        return None;
    }
    let mut kept = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        if k.len() > MAX_PAIR_BYTES {
            return None;
        }
        // A value that reads as a digest is digested too: no two values share one.
        let v = if v.len() > MAX_PAIR_BYTES || v.contains("%~") {
            spillway_policy::digested(v)
        } else {
            v.to_owned()
        };
        kept.push((k.to_owned(), v));
    }
    kept.sort();
    Some(kept.into_boxed_slice())
}

/// What a bucket's rule says for RLQS.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// No rule matches: the domain is not configured (`None`), or these pairs of the
    /// bucket reach no node of it (none: the path they make has no rules).
    Unmatched(Option<Vec<(String, String)>>),
    /// An unlimited rule, or only rules in shadow.
    AllowAll,
    /// A block-all rule (`requests_per_unit: 0`).
    DenyAll,
    /// The tightest enforcing limit, in requests a second.
    Rate(f64),
}

/// The rules RLQS buckets are matched to: the policies and their overrides (limits set
/// as data), as loaded when a report or an explain began.
#[derive(Debug)]
pub struct Rulebook {
    policies: std::sync::Arc<PolicySet>,
    overrides: std::sync::Arc<crate::service::overrides::Index>,
}

impl Rulebook {
    /// `policies` alone, without overrides (a program that reports without a service).
    pub fn of_policies(policies: std::sync::Arc<PolicySet>) -> Rulebook {
        Rulebook {
            policies,
            overrides: std::sync::Arc::default(),
        }
    }

    /// The rules `service` has now.
    pub fn of(service: &crate::Service) -> Rulebook {
        Rulebook {
            policies: arc_swap::Guard::into_inner(service.policies()),
            overrides: service.overrides(),
        }
    }

    /// The policies.
    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }
}

/// What a bucket's rule says: the domain's rules for the bucket's pairs, the tightest
/// enforcing limit of the node as a rate (`concurrency` and `distinct` limits count no
/// rate and are left out). An override of exactly the bucket's pairs (in the order of
/// their keys, as a bucket's pairs are kept) comes first: a bucket's rate follows its
/// override at its next report.
pub fn verdict(book: &Rulebook, domain: &str, pairs: &[(String, String)]) -> Verdict {
    let Some(file) = book.policies.domain(domain) else {
        return Verdict::Unmatched(None);
    };
    let overridden = book
        .overrides
        .get(domain)
        .and_then(|o| o.get(pairs))
        .and_then(|e| e.plan.domain.resolve(pairs));
    let matched = match overridden {
        Some(matched) => matched,
        None => match file.match_bucket(pairs) {
            Ok(matched) => matched,
            Err(left) => return Verdict::Unmatched(Some(left.into_iter().cloned().collect())),
        },
    };
    let mut rate: Option<f64> = None;
    for rule in matched.rules.iter().filter(|r| r.mode == Mode::Enforce) {
        match &rule.limit {
            RuleLimit::BlockAll => return Verdict::DenyAll,
            RuleLimit::Unlimited => {}
            RuleLimit::Limited(limit) if limit.algorithm().takes_member() => {}
            RuleLimit::Limited(limit) => {
                let r = limit.limit() as f64 / limit.window().as_secs_f64();
                rate = Some(rate.map_or(r, |was| was.min(r)));
            }
        }
    }
    rate.map_or(Verdict::AllowAll, Verdict::Rate)
}
