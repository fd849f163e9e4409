//! The streams Envoys open, the buckets they report, and each report's answer: the
//! state behind `StreamRateLimitQuotas`.
//!
//! - A bucket is a domain and the pairs of its id; its rule is found in the domain's
//!   policy again at every report (a reload applies at each Envoy's next report).
//! - Each stream reporting a bucket is a *holder* of it, with the demand it reported.
//!   Its share is booked in the [ledger](super::ledger) (this process's, or Redis's
//!   with every replica's) at each of its reports; the others' shrink at their own.
//! - An answer waits for its Envoy to take it, one per bucket ([`super::streams`]);
//!   what Envoy runs is the share it last took, and it stays booked until the new one
//!   is taken (`running`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use spillway_core::Timestamp;
use spillway_core::fair_share::{Ask, FLOOR};
use spillway_policy::PolicySet;
use tokio::sync::Notify;

use super::buckets::{
    Action, Answer, BucketKey, Pairs, Report, Strategy, Verdict, bucket_pairs, verdict,
};
use super::ledger::Ledger;
use super::streams::{DELIVERY_GRACE, Subscriber, assign};
use crate::config::Unmatched;
use crate::metrics;

/// The RLQS settings.
pub type Settings = crate::config::Rlqs;

/// Envoys of no demand whose floors are kept out of every share: room for one that
/// comes (to this replica or another), whose first report then gets a share at once
/// rather than after the others' next reports shrink theirs (a newcomer left nothing
/// would run its `no_assignment_behavior`, often ALLOW_ALL, meanwhile). A lone Envoy
/// gets all of the rate but that: 95% of it.
const HEADROOM: u32 = 1;

/// Why a stream is refused or ended.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// A report the protocol does not allow: the stream ends `INVALID_ARGUMENT`.
    Invalid(String),
    /// `rlqs_max_streams` are open: the stream is refused `RESOURCE_EXHAUSTED`.
    TooManyStreams(usize),
}

/// Every stream and bucket of this server.
pub struct Quotas {
    pub(super) settings: Settings,
    pub(super) inner: Mutex<Inner>,
    /// Cancelled when the server shuts down: every stream ends.
    stop: tokio_util::sync::CancellationToken,
    /// This replica's name among those sharing buckets through Redis: random at each
    /// start, so that a restarted replica's old shares lapse on their own.
    pub(super) replica: String,
    pub(super) ledger: Box<dyn Ledger>,
}

#[derive(Default)]
pub(super) struct Inner {
    next: u64,
    pub streams: HashMap<u64, Subscriber>,
    pub buckets: HashMap<BucketKey, Bucket>,
}

pub(super) struct Bucket {
    /// Its id as Envoy sends it (answers name it so).
    id: Arc<Pairs>,
    pub holders: HashMap<u64, Holder>,
}

/// One stream's part of a bucket.
#[derive(Clone, Copy, Debug)]
pub(super) struct Holder {
    /// Requests a second it reported (allowed and denied).
    pub demand: f64,
    /// When it last reported the bucket, and last reported a request in it.
    reported: Timestamp,
    active: Timestamp,
    /// The share its Envoy runs (the last it took), until when.
    pub running: Option<(f64, Timestamp)>,
}

/// A reported bucket whose rule has a rate: its share is left to book.
struct Rated {
    key: BucketKey,
    id: Arc<Pairs>,
    rate: f64,
    demand: f64,
    running: f64,
    replaces: Option<String>,
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

impl Quotas {
    /// Shares booked in `ledger`.
    pub fn new(settings: Settings, ledger: Box<dyn Ledger>) -> Quotas {
        Quotas {
            settings,
            inner: Mutex::new(Inner::default()),
            stop: Default::default(),
            replica: format!("{:016x}", rand::random::<u64>()),
            ledger,
        }
    }

    /// How long a share is booked: its TTL, and the grace for its delivery.
    fn booked_for(&self) -> Duration {
        ttl(&self.settings) + DELIVERY_GRACE
    }

    /// The name of `stream`'s holdings in the ledger.
    pub(super) fn holder(&self, stream: u64) -> String {
        format!("{}:{stream}", self.replica)
    }

    /// Ends every stream (a shutdown). Envoy keeps running its assignments until their
    /// TTL while it subscribes again, here or elsewhere; with `expire_on_shutdown`, each
    /// stream is first sent its buckets' assignments with a TTL of 0, so that Envoy
    /// runs its `expired_assignment_behavior` at once.
    pub fn stop(&self, now: Timestamp) {
        if self.settings.expire_on_shutdown {
            let mut inner = self.inner.lock();
            let Inner {
                streams, buckets, ..
            } = &mut *inner;
            for (key, bucket) in buckets.iter() {
                for (stream, h) in &bucket.holders {
                    let (Some((share, _)), Some(s)) = (h.running, streams.get_mut(stream)) else {
                        continue;
                    };
                    let answer = assign(&bucket.id, Strategy::share(share), Duration::ZERO);
                    s.queue(key.clone(), answer, None, now);
                }
            }
            streams.values().for_each(Subscriber::send);
        }
        self.stop.cancel();
    }

    /// Cancelled when every stream must end.
    pub fn stopping(&self) -> tokio_util::sync::CancellationToken {
        self.stop.clone()
    }

    /// A stream opened from `peer` (the Envoy's address, when known): its id, and what
    /// wakes its answers; refused past `rlqs_max_streams` open.
    pub fn open(&self, peer: Option<IpAddr>) -> Result<(u64, Arc<Notify>), Refusal> {
        let mut inner = self.inner.lock();
        let open = inner.streams.values().filter(|s| s.open).count();
        if open >= self.settings.max_streams {
            metrics::rlqs_refused_stream();
            return Err(Refusal::TooManyStreams(self.settings.max_streams));
        }
        inner.next += 1;
        let id = inner.next;
        let subscriber = Subscriber::new(peer);
        let wake = subscriber.wake();
        inner.streams.insert(id, subscriber);
        metrics::rlqs_streams(open + 1);
        Ok((id, wake))
    }

    /// A stream ended: its holdings stay counted until they lapse.
    pub fn close(&self, stream: u64) {
        let mut inner = self.inner.lock();
        if let Some(s) = inner.streams.get_mut(&stream) {
            s.open = false;
        }
        metrics::rlqs_streams(inner.streams.values().filter(|s| s.open).count());
    }

    /// The answers waiting for `stream`, taken at `now` by its Envoy: from now on it
    /// runs what they assign.
    pub fn deliver(&self, stream: u64, now: Timestamp) -> Vec<Answer> {
        let mut inner = self.inner.lock();
        let Inner {
            streams, buckets, ..
        } = &mut *inner;
        let Some(s) = streams.get_mut(&stream) else {
            return Vec::new();
        };
        let (answers, taken) = s.take(now);
        for t in taken {
            if let Some(h) = (buckets.get_mut(&t.key)).and_then(|b| b.holders.get_mut(&stream)) {
                h.running = t.share.map(|share| (share, now.saturating_add(t.ttl)));
            }
        }
        answers
    }

    /// One report of `stream` at `now`, its answers queued: buckets matched to
    /// `policies`' rules, shares booked in the ledger. An error ends the stream.
    pub async fn report(
        &self,
        stream: u64,
        report: Report,
        policies: &PolicySet,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        metrics::rlqs_report();
        let rated = self.take(stream, report, policies, now)?;
        if rated.is_empty() {
            if let Some(s) = self.inner.lock().streams.get(&stream) {
                s.send();
            }
            return Ok(());
        }
        let holder = self.holder(stream);
        let asks: Vec<(BucketKey, Ask<'_>)> = (rated.iter())
            .map(|r| {
                let ask = Ask {
                    holder: &holder,
                    demand: r.demand,
                    rate: r.rate,
                    ttl: self.booked_for(),
                    floor: FLOOR,
                    headroom: HEADROOM,
                    replaces: r.replaces.as_deref(),
                    running: r.running,
                };
                (r.key.clone(), ask)
            })
            .collect();
        let granted = self.ledger.grant(now, &asks).await;
        let ttl = ttl(&self.settings);
        let mut inner = self.inner.lock();
        let Some(s) = inner.streams.get_mut(&stream) else {
            return Ok(());
        };
        for (rated, grant) in rated.into_iter().zip(granted) {
            let Some(grant) = grant else { continue };
            if grant.withheld {
                metrics::rlqs_refused("withheld");
                continue;
            }
            if let Some(h) = &s.share_ratio {
                h.record(grant.share / rated.rate);
            }
            let answer = assign(&rated.id, Strategy::share(grant.share), ttl);
            s.queue(rated.key, answer, Some(grant.share), now);
        }
        s.send();
        Ok(())
    }

    /// The bookkeeping of `report` (under the lock): its buckets matched and their
    /// holders' demands recorded, the answers already known queued (abandons, blanket
    /// rules, unmatched buckets), and the buckets left to book.
    fn take(
        &self,
        stream: u64,
        report: Report,
        policies: &PolicySet,
        now: Timestamp,
    ) -> Result<Vec<Rated>, Refusal> {
        if report.domain.is_empty() {
            return Err(Refusal::Invalid("a usage report needs a domain".into()));
        }
        let max = crate::service::request::MAX_DOMAIN_LEN;
        if report.domain.len() > max {
            return Err(Refusal::Invalid(format!(
                "the domain is {} bytes, the most is {max}",
                report.domain.len()
            )));
        }
        let ttl = ttl(&self.settings);
        let mut rated = Vec::new();
        let mut inner = self.inner.lock();
        let Some(subscriber) = inner.streams.get_mut(&stream) else {
            return Ok(rated);
        };
        let domain: Arc<str> = match &subscriber.domain {
            Some(d) if **d != *report.domain => {
                return Err(Refusal::Invalid(format!(
                    "this stream reports domain '{d}', not '{}': open a stream per domain",
                    report.domain
                )));
            }
            Some(d) => Arc::clone(d),
            None => {
                let d: Arc<str> = Arc::from(report.domain.as_str());
                subscriber.domain = Some(Arc::clone(&d));
                // A series per configured domain, `unknown` for the rest: a client
                // opening streams with made-up domains grows no exposition.
                let label = if policies.domain(&d).is_some() {
                    &*d
                } else {
                    "unknown"
                };
                subscriber.share_ratio = Some(metrics::rlqs_share_ratio(label));
                d
            }
        };
        for usage in report.usages {
            let Some(raw) = usage.bucket.filter(|b| !b.is_empty()) else {
                metrics::rlqs_refused("no_bucket_id");
                continue;
            };
            let Some(pairs) = bucket_pairs(raw.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            else {
                metrics::rlqs_refused("bucket_id_too_large");
                continue;
            };
            let key = BucketKey {
                domain: Arc::clone(&domain),
                pairs,
            };
            let held = (inner.buckets.get(&key)).is_some_and(|b| b.holders.contains_key(&stream));
            let subscriber = inner.streams.get_mut(&stream).expect("found above");
            let mut replaces = None;
            if !held {
                if subscriber.held >= self.settings.max_buckets {
                    metrics::rlqs_refused("too_many_buckets");
                    continue;
                }
                subscriber.held += 1;
                replaces = self.take_over(&mut inner, &key, stream, now);
            }
            let requests = usage.allowed.saturating_add(usage.denied);
            let bucket = inner.buckets.entry(key.clone()).or_insert_with(|| Bucket {
                id: Arc::new(raw),
                holders: HashMap::new(),
            });
            let id = Arc::clone(&bucket.id);
            let holder = bucket.holders.entry(stream).or_insert(Holder {
                demand: 0.0,
                reported: now,
                active: now,
                running: None,
            });
            // A first report (no time elapsed) counts its requests as a second's.
            holder.demand = requests as f64 / usage.elapsed.as_secs_f64().max(1.0);
            holder.reported = now;
            if requests > 0 {
                holder.active = now;
            }
            let running = (holder.running)
                .filter(|(_, until)| *until > now)
                .map_or(0.0, |(share, _)| share);
            let answer = if now.duration_since(holder.active) >= self.settings.abandon_after {
                metrics::rlqs_abandoned();
                // Envoy forgets the bucket when it reads this; until then its
                // assignment runs, and stays booked until it lapses.
                holder.demand = 0.0;
                Some(Answer {
                    bucket: id,
                    action: Action::Abandon,
                })
            } else {
                match verdict(policies, &domain, &key.pairs) {
                    Verdict::Unmatched(_) => match self.settings.unmatched {
                        Unmatched::Allow => Some(assign(&id, Strategy::AllowAll, ttl)),
                        Unmatched::Deny => Some(assign(&id, Strategy::DenyAll, ttl)),
                        Unmatched::NoAnswer => {
                            metrics::rlqs_refused("unmatched");
                            None
                        }
                    },
                    Verdict::AllowAll => Some(assign(&id, Strategy::AllowAll, ttl)),
                    Verdict::DenyAll => Some(assign(&id, Strategy::DenyAll, ttl)),
                    Verdict::Rate(rate) => {
                        rated.push(Rated {
                            key: key.clone(),
                            id,
                            rate,
                            demand: holder.demand,
                            running,
                            replaces,
                        });
                        None
                    }
                }
            };
            if let Some(answer) = answer {
                let s = inner.streams.get_mut(&stream).expect("found above");
                s.queue(key, answer, None, now);
            }
        }
        metrics::rlqs_buckets(inner.buckets.len());
        Ok(rated)
    }

    /// Makes `stream`, about to hold `key`'s bucket, the holder of the share a closed
    /// stream from the same Envoy (its address) still has booked there: the Envoy's
    /// stream broke (a network blip, a balancer's reset, a listener update) and it came
    /// back, still running the assignment it was sent. The closed stream's holding goes
    /// (the latest, if several); its holder name. An Envoy behind an address others
    /// share (a balancer that is not transparent) may take over another's share: at
    /// worst its share twice, until the assignment's TTL.
    fn take_over(
        &self,
        inner: &mut Inner,
        key: &BucketKey,
        stream: u64,
        now: Timestamp,
    ) -> Option<String> {
        let peer = inner.streams.get(&stream)?.peer?;
        let bucket = inner.buckets.get_mut(key)?;
        let booked_for = self.booked_for();
        let old = (bucket.holders.iter())
            .filter(|(s, h)| {
                let closed_from_peer =
                    (inner.streams.get(s)).is_some_and(|o| !o.open && o.peer == Some(peer));
                closed_from_peer && now.duration_since(h.reported) < booked_for
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
        Some(self.holder(old))
    }

    /// Forgets, at `now`, the holdings no longer booked (not reported for a booking's
    /// life, their Envoy's share lapsed), the buckets nobody holds, and the ended
    /// streams that hold nothing.
    pub fn expire(&self, now: Timestamp) {
        self.ledger.expire(now);
        let booked_for = self.booked_for();
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let mut gone: Vec<u64> = Vec::new();
        inner.buckets.retain(|_, bucket| {
            bucket.holders.retain(|stream, h| {
                let keep = now.duration_since(h.reported) < booked_for
                    || h.running.is_some_and(|(_, until)| until > now);
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
        inner.streams.retain(|_, s| s.open || s.held > 0);
        metrics::rlqs_buckets(inner.buckets.len());
    }
}

/// An assignment's TTL: whole seconds, at least one (Envoy 1.40 reads no fraction).
fn ttl(settings: &Settings) -> Duration {
    let d = settings.ttl;
    Duration::from_secs(d.as_secs().max(1) + u64::from(d.subsec_nanos() > 0 && d.as_secs() > 0))
}
