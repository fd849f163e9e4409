//! The streams: where each one's answers wait until its Envoy takes them, one per
//! bucket (a newer answer replaces an older one not yet taken; none is dropped
//! silently), and what each Envoy runs once it has them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use spillway_core::Timestamp;
use tokio::sync::Notify;

use super::buckets::{Action, Answer, BucketKey, Strategy};
use crate::metrics;

/// How long an answer may wait for its Envoy to take it: one not taken by then is not
/// sent (a later report brings a fresh one). A share is booked for its TTL and this
/// long, so that what Envoy runs never outlives what is booked for it.
pub const DELIVERY_GRACE: Duration = Duration::from_secs(2);

/// One stream.
pub(super) struct Subscriber {
    /// Whether reports still come (an ended stream's holdings count until they lapse).
    pub open: bool,
    /// The Envoy's address: a stream it opens after this one broke takes over this
    /// one's shares.
    pub peer: Option<IpAddr>,
    /// Set by its first report.
    pub domain: Option<Arc<str>>,
    /// `spillway_rlqs_share_ratio` of its domain (`unknown` for one not configured).
    pub share_ratio: Option<::metrics::Histogram>,
    /// Buckets it holds.
    pub held: usize,
    /// Responses taken by its Envoy (each holds a report's answers, or those that
    /// waited together).
    pub sent: u64,
    /// Answers waiting, one per bucket.
    pending: HashMap<BucketKey, Pending>,
    /// Woken when an answer waits.
    wake: Arc<Notify>,
}

/// An answer waiting, since `at`; the share it assigns, if any.
struct Pending {
    answer: Answer,
    at: Timestamp,
    share: Option<f64>,
}

/// An answer taken: the bucket, and the share its Envoy runs from now on (`None`: no
/// share, a blanket rule or an abandon).
pub(super) struct Taken {
    pub key: BucketKey,
    pub share: Option<f64>,
    pub ttl: Duration,
}

impl Subscriber {
    pub fn new(peer: Option<IpAddr>) -> Subscriber {
        Subscriber {
            open: true,
            peer,
            domain: None,
            share_ratio: None,
            held: 0,
            sent: 0,
            pending: HashMap::new(),
            wake: Arc::new(Notify::new()),
        }
    }

    /// What wakes the stream's answers.
    pub fn wake(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// Queues `answer` for `key` at `now` (replacing one waiting), `share` the share it
    /// assigns; sent once [`send`](Subscriber::send) is called (a report's answers go
    /// together).
    pub fn queue(&mut self, key: BucketKey, answer: Answer, share: Option<f64>, now: Timestamp) {
        self.pending.insert(
            key,
            Pending {
                answer,
                at: now,
                share,
            },
        );
    }

    /// Wakes the stream's answers: what is queued goes when its Envoy can take it.
    pub fn send(&self) {
        if !self.pending.is_empty() {
            self.wake.notify_one();
        }
    }

    /// The answers waiting at `now`, taken: those within [`DELIVERY_GRACE`], with what
    /// each makes its Envoy run (the others counted `undelivered` and dropped).
    pub fn take(&mut self, now: Timestamp) -> (Vec<Answer>, Vec<Taken>) {
        let mut answers = Vec::with_capacity(self.pending.len());
        let mut taken = Vec::with_capacity(self.pending.len());
        for (key, p) in self.pending.drain() {
            if now.duration_since(p.at) > DELIVERY_GRACE {
                metrics::rlqs_refused("undelivered");
                continue;
            }
            let ttl = match p.answer.action {
                Action::Assign { ttl, .. } => ttl,
                Action::Abandon => Duration::ZERO,
            };
            taken.push(Taken {
                key,
                share: p.share,
                ttl,
            });
            answers.push(p.answer);
        }
        self.sent += u64::from(!answers.is_empty());
        metrics::rlqs_assignments(answers.len());
        (answers, taken)
    }
}

/// An assignment of `strategy` for `ttl` to the bucket `id`.
pub(super) fn assign(id: &Arc<super::buckets::Pairs>, strategy: Strategy, ttl: Duration) -> Answer {
    Answer {
        bucket: Arc::clone(id),
        action: Action::Assign { strategy, ttl },
    }
}
