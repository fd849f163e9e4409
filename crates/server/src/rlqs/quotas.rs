//! The streams Envoys open, the buckets they report, and each report's answer: the
//! state behind `StreamRateLimitQuotas`.
//!
//! - A bucket is a domain and the pairs of its id; its rule is found in the domain's
//!   policy again at every report (a reload applies at each Envoy's next report).
//! - Each stream reporting a bucket is a *holder* of it, with the demand it reported.
//!   Its share is booked in the [ledger](super::ledger) (this process's, or Redis's
//!   with every replica's) at each of its reports (`report.rs`); the others' shrink at
//!   their own.
//! - An answer waits for its Envoy to take it, one per bucket ([`super::streams`]).
//!   What Envoy runs is the share it last took (`running`): a decrease stays booked as
//!   that until its Envoy takes the new one, then is settled.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use spillway_core::Timestamp;
use tokio::sync::Notify;

use super::buckets::{Answer, BucketKey, Pairs, Strategy};
use super::ledger::Ledger;
use super::streams::{DELIVERY_GRACE, Subscriber, assign};
use crate::metrics;

/// The RLQS settings.
pub type Settings = crate::config::Rlqs;

/// Envoys of no demand whose floors are kept out of every share: room for one that
/// comes (to this replica or another), whose first report then gets a share at once
/// rather than after the others' next reports shrink theirs (a newcomer left nothing
/// would run its `no_assignment_behavior`, often ALLOW_ALL, meanwhile). A lone Envoy
/// gets all of the rate but that: 95% of it.
pub(super) const HEADROOM: u32 = 1;

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
    pub next: u64,
    pub streams: HashMap<u64, Subscriber>,
    pub buckets: HashMap<BucketKey, Bucket>,
}

pub(super) struct Bucket {
    /// Its id as Envoy sends it (answers name it so).
    pub id: Arc<Pairs>,
    pub holders: HashMap<u64, Holder>,
}

/// One stream's part of a bucket.
#[derive(Clone, Copy, Debug)]
pub(super) struct Holder {
    /// Requests a second it reported (allowed and denied).
    pub demand: f64,
    /// When it last reported the bucket, and last reported a request in it.
    pub reported: Timestamp,
    pub active: Timestamp,
    /// The share its Envoy runs (the last it took), until when.
    pub running: Option<(f64, Timestamp)>,
}

/// The decreases a stream's Envoy took: what each of its buckets runs now.
#[derive(Debug)]
pub struct Settling {
    stream: u64,
    settles: Vec<(BucketKey, f64)>,
}

impl Settling {
    /// Whether there is nothing to settle.
    pub fn is_empty(&self) -> bool {
        self.settles.is_empty()
    }
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
    pub(super) fn booked_for(&self) -> Duration {
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
    /// runs what they assign. The decreases among them, to [`settle`](Quotas::settle)
    /// in the ledger.
    pub fn deliver(&self, stream: u64, now: Timestamp) -> (Vec<Answer>, Settling) {
        let mut settling = Settling {
            stream,
            settles: Vec::new(),
        };
        let mut inner = self.inner.lock();
        let Inner {
            streams, buckets, ..
        } = &mut *inner;
        let Some(s) = streams.get_mut(&stream) else {
            return (Vec::new(), settling);
        };
        let (answers, taken) = s.take(now);
        for t in taken {
            let Some(h) = (buckets.get_mut(&t.key)).and_then(|b| b.holders.get_mut(&stream)) else {
                continue;
            };
            let ran = (h.running).filter(|(_, until)| *until > now);
            if let (Some(share), Some((was, _))) = (t.share, ran)
                && share < was
            {
                settling.settles.push((t.key, share));
            }
            h.running = t.share.map(|share| (share, now.saturating_add(t.ttl)));
        }
        (answers, settling)
    }

    /// Books in the ledger the decreases a stream's Envoy took ([`deliver`]): their room
    /// is free for the others at once, not at the stream's next report.
    ///
    /// [`deliver`]: Quotas::deliver
    pub async fn settle(&self, settling: Settling, now: Timestamp) {
        if settling.settles.is_empty() {
            return;
        }
        let holder = self.holder(settling.stream);
        self.ledger.settle(now, &holder, &settling.settles).await;
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
pub(super) fn ttl(settings: &Settings) -> Duration {
    let d = settings.ttl;
    Duration::from_secs(d.as_secs().max(1) + u64::from(d.subsec_nanos() > 0 && d.as_secs() > 0))
}
