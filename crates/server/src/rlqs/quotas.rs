//! The buckets Envoys report, who reports each, and what each was assigned: the state
//! behind `StreamRateLimitQuotas`, and the rules that keep the assignments of a bucket
//! within its limit.
//!
//! - A bucket is a domain and the pairs of its `bucket_id` (sorted: the map has no
//!   order); its rule is found in the domain's policy as a descriptor of those pairs
//!   ([`spillway_policy::Domain::resolve_bucket`]), again on every report (a reload
//!   applies at each Envoy's next report).
//! - Each stream reporting a bucket is a *holder* of it, with the demand it reported
//!   (allowed and denied a second) and what it was last sent. An assignment lives until
//!   its TTL whatever happens to the stream (Envoy keeps running it), so the share of a
//!   holder whose stream ended stays counted until then ([`Quotas::expire`]).
//! - On each report the bucket's limit, less what holders that cannot be told hold, is
//!   shared among the holders ([`super::shares`]). Another holder is sent its share
//!   only when it went down, before the reporting stream gets its own (its renewal);
//!   a decrease that cannot be delivered is taken from the reporter's share instead:
//!   the shares Envoys run never add up to more than the limit.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::{
    BucketAction,
    bucket_action::{AbandonAction, BucketAction as Action, QuotaAssignmentAction},
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::r#type::v3::{
    RateLimitStrategy, TokenBucket,
    rate_limit_strategy::{BlanketRule, Strategy},
};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use futures_util::StreamExt;
use parking_lot::Mutex;
use spillway_core::Mode;
use spillway_policy::{PolicySet, RuleLimit};
use spillway_redis::RedisStore;
use spillway_redis::quota::Ask;
use tokio::sync::mpsc;

use super::shares;
use crate::metrics;

mod explain;

pub use explain::{ExplainedHolder, ExplainedRule, Explanation};

/// What a stream is sent: answers, or the status that ends it.
type Outbox = mpsc::Sender<Result<RateLimitQuotaResponse, tonic::Status>>;

/// The most pairs a bucket id may have, and the most bytes of each key or value.
const MAX_PAIRS: usize = 16;
const MAX_PAIR_BYTES: usize = 256;

/// The RLQS settings.
pub type Settings = crate::config::Rlqs;

/// Every stream and bucket of this server.
pub struct Quotas {
    settings: Settings,
    inner: Mutex<Inner>,
    /// Cancelled when the server shuts down: every stream ends.
    stop: tokio_util::sync::CancellationToken,
    /// This replica's name among those sharing buckets through Redis: random at each
    /// start, so that a restarted replica's old shares lapse on their own.
    replica: String,
    /// Where the shares live when the store is Redis: every replica's holders of a
    /// bucket share its limit there. `None`: in this process alone.
    shared: Option<RedisStore>,
}

impl std::fmt::Debug for Quotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("Quotas")
            .field("streams", &inner.streams.len())
            .field("buckets", &inner.buckets.len())
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// `spillway_rlqs_streams`: the streams open now.
    fn count_open(&self) {
        metrics::rlqs_streams(self.streams.values().filter(|s| s.outbox.is_some()).count());
    }

    /// Sends `stream` its `answer`, if there is one.
    fn answer(&mut self, stream: u64, answer: Vec<BucketAction>) {
        let n = answer.len();
        if n > 0
            && let Some(subscriber) = self.streams.get_mut(&stream)
            && subscriber.send(answer)
        {
            metrics::rlqs_assignments(n);
        }
    }
}

/// A reported bucket whose rule has a rate: its share is left to work out.
struct Rated {
    key: BucketKey,
    id: BucketId,
    rate: f64,
    /// The reporter's demand, requests a second.
    demand: f64,
    /// The closed stream of the same Envoy whose share the reporter took over.
    replaces: Option<u64>,
}

/// Records a share of `rate` in the stream's `spillway_rlqs_share_ratio`.
fn note_share(histogram: Option<&::metrics::Histogram>, share: f64, rate: f64) {
    if let Some(h) = histogram {
        h.record(share / rate);
    }
}

/// The shares of one report granted through Redis at once.
const GRANTS_AT_ONCE: usize = 32;

/// Envoys of no demand counted in every share worked out through Redis: the room kept
/// for one that comes to another replica, whose first report then gets a share at once
/// rather than after the others' next reports shrink theirs (`quota.lua`'s headroom).
const HEADROOM: u32 = 1;

#[derive(Default)]
struct Inner {
    next: u64,
    streams: HashMap<u64, Subscriber>,
    buckets: HashMap<BucketKey, Bucket>,
}

/// One stream: where its answers go, its domain (set by its first report), and how
/// many buckets it holds.
struct Subscriber {
    outbox: Option<Outbox>,
    /// The Envoy's address: a stream it opens after this one broke takes over this
    /// one's shares ([`take_over`]).
    peer: Option<IpAddr>,
    domain: Option<Arc<str>>,
    /// `spillway_rlqs_share_ratio` of its domain (set with it).
    share_ratio: Option<::metrics::Histogram>,
    held: usize,
    /// Answers sent to it.
    sent: u64,
}

impl Subscriber {
    /// Sends `actions`, unless the stream ended or reads too slowly (its next report
    /// brings them again); whether they went.
    fn send(&mut self, actions: Vec<BucketAction>) -> bool {
        let sent = self.outbox.as_ref().is_some_and(|o| {
            o.try_send(Ok(RateLimitQuotaResponse {
                bucket_action: actions,
            }))
            .is_ok()
        });
        self.sent += u64::from(sent);
        sent
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct BucketKey {
    domain: Arc<str>,
    pairs: Box<[(String, String)]>,
}

struct Bucket {
    id: BucketId,
    holders: HashMap<u64, Holder>,
}

/// One stream's part of a bucket.
#[derive(Clone, Copy, Debug, Default)]
struct Holder {
    /// Requests a second it reported (allowed and denied).
    demand: f64,
    /// When it last reported the bucket, and last reported a request in it (µs).
    reported: u64,
    active: u64,
    /// What it was last sent, while that lives.
    assigned: Option<Assigned>,
}

/// A token bucket sent to a holder: its rate (requests a second), until when (µs).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Assigned {
    share: f64,
    until: u64,
}

/// What a bucket's rule says for RLQS.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    /// No rule, an unlimited one, or only rules in shadow.
    AllowAll,
    /// A block-all rule (`requests_per_unit: 0`).
    DenyAll,
    /// The tightest enforcing limit, in requests a second.
    Rate(f64),
}

/// What a bucket's rule says: the domain's rules for the bucket's pairs, the tightest
/// enforcing limit of the node as a rate (`concurrency` and `distinct` limits count no
/// rate and are left out).
fn verdict(policies: &PolicySet, domain: &str, pairs: &[(String, String)]) -> Verdict {
    let Some(matched) = policies
        .domain(domain)
        .and_then(|d| d.resolve_bucket(pairs))
    else {
        return Verdict::AllowAll;
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

impl Quotas {
    pub fn new(settings: Settings) -> Quotas {
        Quotas {
            settings,
            inner: Mutex::new(Inner::default()),
            stop: Default::default(),
            replica: format!("{:016x}", rand::random::<u64>()),
            shared: None,
        }
    }

    /// Shares kept in `redis`, with every other replica's that uses it.
    pub fn shared_through(self, redis: RedisStore) -> Quotas {
        Quotas {
            shared: Some(redis),
            ..self
        }
    }

    /// Ends every stream (a shutdown). Envoy keeps running its assignments until their
    /// TTL while it subscribes again, here or elsewhere; with `expire_on_shutdown`, each
    /// stream is first sent its buckets' assignments with a TTL of 0, so that Envoy
    /// runs its `expired_assignment_behavior` at once.
    pub fn stop(&self) {
        if self.settings.expire_on_shutdown {
            let mut inner = self.inner.lock();
            let inner = &mut *inner;
            let mut expiring: HashMap<u64, Vec<BucketAction>> = HashMap::new();
            for bucket in inner.buckets.values_mut() {
                for (stream, holder) in &mut bucket.holders {
                    if let Some(a) = holder.assigned.take() {
                        let action = assignment(bucket.id.clone(), token_bucket(a.share), 0);
                        expiring.entry(*stream).or_default().push(action);
                    }
                }
            }
            for (stream, actions) in expiring {
                if let Some(s) = inner.streams.get_mut(&stream) {
                    let n = actions.len();
                    if s.send(actions) {
                        metrics::rlqs_assignments(n);
                    }
                }
            }
        }
        self.stop.cancel();
    }

    /// Cancelled when every stream must end.
    pub fn stopping(&self) -> tokio_util::sync::CancellationToken {
        self.stop.clone()
    }

    /// A stream opened from `peer` (the Envoy's address, when known): its id.
    pub fn open(&self, outbox: Outbox, peer: Option<IpAddr>) -> u64 {
        let mut inner = self.inner.lock();
        inner.next += 1;
        let id = inner.next;
        inner.streams.insert(
            id,
            Subscriber {
                outbox: Some(outbox),
                peer,
                domain: None,
                share_ratio: None,
                held: 0,
                sent: 0,
            },
        );
        inner.count_open();
        id
    }

    /// A stream ended: nothing more can be sent to it, and its holdings stay counted
    /// until their assignments lapse.
    pub fn close(&self, stream: u64) {
        let mut inner = self.inner.lock();
        if let Some(s) = inner.streams.get_mut(&stream) {
            s.outbox = None;
        }
        inner.count_open();
    }

    /// One report of `stream` at `now` (µs), its answer sent: buckets matched to
    /// `policies`' rules, shares recomputed (in this process, or through Redis). An
    /// error ends the stream.
    pub async fn report(
        &self,
        stream: u64,
        report: RateLimitQuotaUsageReports,
        policies: &PolicySet,
        now: u64,
    ) -> Result<(), tonic::Status> {
        metrics::rlqs_report();
        let ttl = whole_secs(self.settings.ttl);
        let (mut answer, rated, share_ratio, redis) = {
            let mut inner = self.inner.lock();
            let inner = &mut *inner;
            let (mut answer, rated) = self.take(inner, stream, report, policies, now)?;
            let share_ratio = inner
                .streams
                .get(&stream)
                .and_then(|s| s.share_ratio.clone());
            let Some(redis) = &self.shared else {
                for rated in rated {
                    let bucket = inner.buckets.get_mut(&rated.key).expect("taken above");
                    let Some(mine) =
                        share_out(bucket, stream, rated.rate, now, ttl, &mut inner.streams)
                    else {
                        metrics::rlqs_refused("withheld");
                        continue;
                    };
                    note_share(share_ratio.as_ref(), mine, rated.rate);
                    answer.push(assignment(rated.id, token_bucket(mine), ttl));
                }
                inner.answer(stream, answer);
                return Ok(());
            };
            (answer, rated, share_ratio, redis)
        };
        let holder = format!("{}:{stream}", self.replica);
        // At most GRANTS_AT_ONCE on their way at once: a report of a thousand buckets
        // would otherwise queue a thousand calls, the last ones past the store's
        // timeout before they are sent (measured: 317 to 984 of 1,000 answered).
        let replaced: Vec<Option<String>> = (rated.iter())
            .map(|r| r.replaces.map(|old| format!("{}:{old}", self.replica)))
            .collect();
        let calls: Vec<_> = (rated.iter().zip(&replaced).map(|(r, replaces)| {
            let key = redis.quota_key(&r.key.domain, &r.key.pairs);
            let ask = Ask {
                holder: &holder,
                demand: r.demand,
                rate: r.rate,
                now,
                ttl: ttl * 1_000_000,
                floor: shares::FLOOR,
                headroom: HEADROOM,
                replaces: replaces.as_deref(),
            };
            async move { redis.grant_share(&key, ask).await }
        }))
        .collect();
        let grants: Vec<_> = futures_util::stream::iter(calls)
            .buffered(GRANTS_AT_ONCE)
            .collect()
            .await;
        let mut inner = self.inner.lock();
        for (rated, grant) in rated.into_iter().zip(grants) {
            let (share, withheld) = match grant {
                Ok(granted) => (granted.share, granted.withheld),
                Err(e) => {
                    // Nothing sent: Envoy runs its assignment to its TTL, then its
                    // `expired_assignment_behavior`.
                    metrics::rlqs_refused("store_failed");
                    tracing::warn!(error = %e, "an RLQS share could not be granted through Redis");
                    continue;
                }
            };
            let holder = inner
                .buckets
                .get_mut(&rated.key)
                .and_then(|b| b.holders.get_mut(&stream));
            if let Some(h) = holder {
                h.assigned = (!withheld).then_some(Assigned {
                    share,
                    until: now + ttl * 1_000_000,
                });
            }
            if withheld {
                metrics::rlqs_refused("withheld");
                continue;
            }
            note_share(share_ratio.as_ref(), share, rated.rate);
            answer.push(assignment(rated.id, token_bucket(share), ttl));
        }
        inner.answer(stream, answer);
        Ok(())
    }

    /// The bookkeeping of `report` (under the lock): its buckets matched and their
    /// holders' demands recorded; the answers already known (abandons, blanket rules),
    /// and the buckets left to share out.
    fn take(
        &self,
        inner: &mut Inner,
        stream: u64,
        report: RateLimitQuotaUsageReports,
        policies: &PolicySet,
        now: u64,
    ) -> Result<(Vec<BucketAction>, Vec<Rated>), tonic::Status> {
        if report.domain.is_empty() {
            return Err(tonic::Status::invalid_argument(
                "a usage report needs a domain",
            ));
        }
        let max = crate::service::request::MAX_DOMAIN_LEN;
        if report.domain.len() > max {
            return Err(tonic::Status::invalid_argument(format!(
                "the domain is {} bytes, the most is {max}",
                report.domain.len()
            )));
        }
        let (mut answer, mut rated) = (Vec::new(), Vec::new());
        let Some(subscriber) = inner.streams.get_mut(&stream) else {
            return Ok((answer, rated));
        };
        let domain: Arc<str> = match &subscriber.domain {
            Some(d) if **d != *report.domain => {
                return Err(tonic::Status::invalid_argument(format!(
                    "this stream reports domain '{d}', not '{}': open a stream per domain",
                    report.domain
                )));
            }
            Some(d) => Arc::clone(d),
            None => {
                let d: Arc<str> = Arc::from(report.domain.as_str());
                subscriber.domain = Some(Arc::clone(&d));
                // A series per configured domain, never one a stream names: a client
                // opening streams with made-up domains grows no exposition.
                subscriber.share_ratio =
                    (policies.domain(&d).is_some()).then(|| metrics::rlqs_share_ratio(&d));
                d
            }
        };
        let ttl = whole_secs(self.settings.ttl);
        for usage in report.bucket_quota_usages {
            let Some(id) = usage.bucket_id.filter(|id| !id.bucket.is_empty()) else {
                metrics::rlqs_refused("no_bucket_id");
                continue;
            };
            let Some(pairs) = pairs(&id) else {
                metrics::rlqs_refused("bucket_id_too_large");
                continue;
            };
            let key = BucketKey {
                domain: Arc::clone(&domain),
                pairs,
            };
            let held = inner
                .buckets
                .get(&key)
                .is_some_and(|b| b.holders.contains_key(&stream));
            let subscriber = inner.streams.get_mut(&stream).expect("found above");
            let mut replaces = None;
            if !held {
                if subscriber.held >= self.settings.max_buckets {
                    metrics::rlqs_refused("too_many_buckets");
                    continue;
                }
                subscriber.held += 1;
                replaces = take_over(inner, &key, stream, now);
            }
            let requests = (usage.num_requests_allowed).saturating_add(usage.num_requests_denied);
            let elapsed = usage.time_elapsed.map_or(0.0, |d| {
                d.seconds.max(0) as f64 + f64::from(d.nanos.max(0)) / 1e9
            });
            let bucket = inner.buckets.entry(key.clone()).or_insert_with(|| Bucket {
                id: id.clone(),
                holders: HashMap::new(),
            });
            let holder = bucket.holders.entry(stream).or_insert(Holder {
                active: now,
                ..Holder::default()
            });
            // A first report (no time elapsed) counts its requests as a second's.
            holder.demand = requests as f64 / elapsed.max(1.0);
            holder.reported = now;
            if requests > 0 {
                holder.active = now;
            }
            if now.saturating_sub(holder.active) >= self.settings.abandon_after.as_micros() as u64 {
                answer.push(BucketAction {
                    bucket_id: Some(id),
                    bucket_action: Some(Action::AbandonAction(AbandonAction {})),
                });
                metrics::rlqs_abandoned();
                // Envoy forgets the bucket when it reads this; until then its
                // assignment runs, so it stays counted until it lapses.
                holder.demand = 0.0;
                continue;
            }
            match verdict(policies, &domain, &key.pairs) {
                Verdict::AllowAll => {
                    holder.assigned = None;
                    answer.push(assignment(id, blanket(BlanketRule::AllowAll), ttl));
                }
                Verdict::DenyAll => {
                    holder.assigned = None;
                    answer.push(assignment(id, blanket(BlanketRule::DenyAll), ttl));
                }
                Verdict::Rate(rate) => rated.push(Rated {
                    key,
                    id,
                    rate,
                    demand: holder.demand,
                    replaces,
                }),
            }
        }
        metrics::rlqs_buckets(inner.buckets.len());
        Ok((answer, rated))
    }

    /// Forgets, at `now` (µs), the holdings whose assignment has lapsed and that are no
    /// longer reported (their stream ended, or it stopped reporting the bucket), the
    /// buckets nobody holds, and the ended streams that hold nothing.
    pub fn expire(&self, now: u64) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let ttl = self.settings.ttl.as_micros() as u64;
        let mut gone: Vec<u64> = Vec::new();
        inner.buckets.retain(|_, bucket| {
            bucket.holders.retain(|stream, h| {
                let open = inner
                    .streams
                    .get(stream)
                    .is_some_and(|s| s.outbox.is_some());
                let lapsed = h.assigned.is_none_or(|a| a.until <= now);
                let keep = open && now.saturating_sub(h.reported) < ttl || !lapsed;
                if !keep {
                    gone.push(*stream);
                }
                keep
            });
            !bucket.holders.is_empty()
        });
        for stream in gone {
            if let Some(s) = inner.streams.get_mut(&stream) {
                s.held = s.held.saturating_sub(1);
            }
        }
        inner
            .streams
            .retain(|_, s| s.outbox.is_some() || s.held > 0);
        metrics::rlqs_buckets(inner.buckets.len());
    }
}

/// The share of `bucket`'s `rate` at `now` of `stream`, which reported it, after the
/// decreases of the others are sent (an increase waits for their own reports). Holders
/// that cannot be told (their stream ended) keep what they were sent until it lapses; a
/// decrease that cannot be delivered (a stream that reads too slowly) comes off the
/// reporter's share instead. `None`: *withheld* — the reporter had no live share and
/// what the others keep leaves nothing of its fair one (a closed stream's lingering
/// share, say): it is sent nothing, so its Envoy keeps what it runs rather than a
/// denial, and asks again at its next report (`quota.lua`'s twin rule).
fn share_out(
    bucket: &mut Bucket,
    stream: u64,
    rate: f64,
    now: u64,
    ttl: u64,
    streams: &mut HashMap<u64, Subscriber>,
) -> Option<f64> {
    let reachable = |streams: &HashMap<u64, Subscriber>, s: &u64| {
        streams.get(s).is_some_and(|s| s.outbox.is_some())
    };
    let live = |h: &Holder| {
        h.assigned
            .filter(|a| a.until > now)
            .map_or(0.0, |a| a.share)
    };
    let mut fixed = 0.0;
    let mut ids = Vec::new();
    let mut demands = Vec::new();
    for (s, h) in &bucket.holders {
        if reachable(streams, s) {
            ids.push(*s);
            demands.push(h.demand);
        } else {
            fixed += live(h);
        }
    }
    let fairly = ids
        .iter()
        .position(|s| *s == stream)
        .map_or(0.0, |i| shares::shares(rate, &demands)[i]);
    let had = bucket.holders.get(&stream).map_or(0.0, live);
    let shares = shares::shares((rate - fixed).max(0.0), &demands);
    let until = now + ttl * 1_000_000;
    let mut mine = 0.0;
    let mut excess = 0.0;
    for (s, share) in ids.into_iter().zip(shares) {
        let h = bucket.holders.get_mut(&s).expect("listed above");
        if s == stream {
            mine = share;
            continue;
        }
        let was = live(h);
        if share >= was {
            continue;
        }
        let action = assignment(bucket.id.clone(), token_bucket(share), ttl);
        let to = streams.get_mut(&s).expect("reachable");
        if to.send(vec![action]) {
            metrics::rlqs_assignments(1);
            h.assigned = Some(Assigned { share, until });
        } else {
            excess += was - share;
        }
    }
    let mine = (mine - excess).max(0.0);
    let h = bucket
        .holders
        .get_mut(&stream)
        .expect("the reporter holds it");
    if mine < shares::TINY && fairly >= shares::TINY && had < shares::TINY {
        h.assigned = None;
        return None;
    }
    h.assigned = Some(Assigned { share: mine, until });
    Some(mine)
}

/// Makes `stream`, about to hold `key`'s bucket, the holder of the share a closed
/// stream from the same Envoy (its address) still holds there: the Envoy's stream
/// broke (a network blip, a balancer's reset, a listener update) and it came back, still
/// running the assignment it was sent. The closed stream's holding goes (the latest,
/// if several); its id. An Envoy behind an address others share (a balancer that is
/// not transparent) may take over another's share: at worst its share twice, until
/// the assignment's TTL.
fn take_over(inner: &mut Inner, key: &BucketKey, stream: u64, now: u64) -> Option<u64> {
    let peer = inner.streams.get(&stream)?.peer?;
    let bucket = inner.buckets.get_mut(key)?;
    let old = (bucket.holders.iter())
        .filter(|(s, h)| {
            let closed_from_peer = inner
                .streams
                .get(s)
                .is_some_and(|o| o.outbox.is_none() && o.peer == Some(peer));
            closed_from_peer && h.assigned.is_some_and(|a| a.until > now)
        })
        .map(|(s, _)| *s)
        .max()?;
    let holder = bucket.holders.remove(&old)?;
    bucket.holders.insert(
        stream,
        Holder {
            active: now,
            ..holder
        },
    );
    if let Some(o) = inner.streams.get_mut(&old) {
        o.held = o.held.saturating_sub(1);
    }
    Some(old)
}

/// A bucket id's pairs, sorted; `None` when it is too large.
fn pairs(id: &BucketId) -> Option<Box<[(String, String)]>> {
    bucket_pairs(id.bucket.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// Pairs as a bucket keeps them, sorted: a value over [`MAX_PAIR_BYTES`] (a client's
/// header, say) kept as its digest, as descriptor values are
/// ([`spillway_policy::digested`]: refusing it would leave Envoy to its
/// `no_assignment_behavior`); `None` past [`MAX_PAIRS`] pairs or a key over
/// [`MAX_PAIR_BYTES`] (keys come from Envoy's configuration, not from clients).
pub(crate) fn bucket_pairs<'a>(
    pairs: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> Option<Box<[(String, String)]>> {
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
    Some(sorted(kept))
}

fn sorted(mut pairs: Vec<(String, String)>) -> Box<[(String, String)]> {
    pairs.sort();
    pairs.into_boxed_slice()
}

/// Whole seconds, at least one (Envoy 1.40 reads no fraction of a TTL).
fn whole_secs(d: Duration) -> u64 {
    d.as_secs().max(1) + u64::from(d.subsec_nanos() > 0 && d.as_secs() > 0)
}

fn assignment(id: BucketId, strategy: Strategy, ttl: u64) -> BucketAction {
    BucketAction {
        bucket_id: Some(id),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(PbDuration {
                seconds: ttl as i64,
                nanos: 0,
            }),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

fn blanket(rule: BlanketRule) -> Strategy {
    Strategy::BlanketRule(rule as i32)
}

/// A share as a token bucket Envoy 1.40 runs (one fill at most at once), or DENY_ALL
/// for one too small to write. Envoy 1.40 keeps its running bucket when a new one has
/// the same `max_tokens`, `tokens_per_fill` and `fill_interval` *nanoseconds* (it runs
/// whole seconds, and compares no seconds), so the interval's nanoseconds repeat its
/// seconds: two intervals that differ look different (a few microseconds, slower).
fn token_bucket(share: f64) -> Strategy {
    match shares::token_bucket(share) {
        Some((tokens, secs)) => Strategy::TokenBucket(TokenBucket {
            max_tokens: tokens,
            tokens_per_fill: Some(UInt32Value { value: tokens }),
            fill_interval: Some(PbDuration {
                seconds: secs as i64,
                nanos: secs as i32,
            }),
        }),
        None => blanket(BlanketRule::DenyAll),
    }
}
