//! One report of a stream: its buckets matched to the rules and their holders'
//! demands recorded (under the lock), the answers already known queued, the rated
//! buckets' shares booked in the ledger, and their answers queued.

use std::collections::HashMap;
use std::sync::Arc;

use spillway_core::Timestamp;
use spillway_core::fair_share::{Ask, FLOOR};

use super::buckets::{
    Action, Answer, BucketKey, Pairs, Report, Rulebook, Strategy, Verdict, bucket_pairs, verdict,
};
use super::quotas::{Bucket, HEADROOM, Holder, Inner, Quotas, Refusal, ttl};
use super::streams::assign;
use crate::config::Unmatched;
use crate::metrics;

/// A reported bucket whose rule has a rate: its share is left to book.
struct Rated {
    key: BucketKey,
    id: Arc<Pairs>,
    rate: f64,
    demand: f64,
    running: f64,
    replaces: Option<String>,
}

impl Quotas {
    /// One report of `stream` at `now`, its answers queued: buckets matched to
    /// `book`'s rules, shares booked in the ledger. An error ends the stream.
    pub async fn report(
        &self,
        stream: u64,
        report: Report,
        book: &Rulebook,
        now: Timestamp,
    ) -> Result<(), Refusal> {
        metrics::rlqs_report();
        let rated = self.take(stream, report, book, now)?;
        if rated.is_empty() {
            if let Some(s) = self.inner.lock().streams.get(&stream) {
                s.send();
            }
            return Ok(());
        }
        let holder = self.holder(stream);
        let asks: Vec<(&BucketKey, Ask<'_>)> = (rated.iter())
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
                (&r.key, ask)
            })
            .collect();
        let granted = self.ledger.grant(now, &asks).await;
        let ttl = ttl(&self.settings);
        let mut inner = self.inner.lock();
        let Inner {
            streams, buckets, ..
        } = &mut *inner;
        // Left nothing while a closed stream's share lingers here (an Envoy that broke
        // away, maybe this one's): sent nothing, so an Envoy that came back keeps what
        // it runs. Left nothing by open streams, which shrink at their own reports:
        // sent its share of 0 (DENY_ALL until its next report), never left to a
        // `no_assignment_behavior` that may admit everything.
        let lingering: Vec<bool> = (rated.iter().zip(&granted))
            .map(|(r, g)| {
                g.is_some_and(|g| g.withheld)
                    && (buckets.get(&r.key)).is_some_and(|b| {
                        (b.holders.keys()).any(|h| streams.get(h).is_some_and(|o| !o.open))
                    })
            })
            .collect();
        let Some(s) = streams.get_mut(&stream) else {
            return Ok(());
        };
        for ((rated, grant), lingering) in rated.into_iter().zip(granted).zip(lingering) {
            let Some(grant) = grant else { continue };
            if lingering {
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
        book: &Rulebook,
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
                let label = if book.policies().domain(&d).is_some() {
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
            // (Looked up twice rather than the key cloned for every report of it.)
            if !inner.buckets.contains_key(&key) {
                let bucket = Bucket {
                    id: Arc::new(raw),
                    holders: HashMap::new(),
                };
                inner.buckets.insert(key.clone(), bucket);
            }
            let bucket = inner.buckets.get_mut(&key).expect("inserted above");
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
                match verdict(book, &domain, &key.pairs) {
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
                            key,
                            id,
                            rate,
                            demand: holder.demand,
                            running,
                            replaces,
                        });
                        continue;
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
}
