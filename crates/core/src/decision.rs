//! `Decision`: what a limit says about one request. A denial is data, not an error.

use std::time::Duration;

/// Whether a request fits, and if not, when it will.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted (and charged, unless the batch it belonged to was denied by another limit).
    Allowed,
    /// Denied for now; the same cost will be admitted after `retry_after` if nothing
    /// else is charged in between.
    Denied {
        /// How long until the same cost fits.
        retry_after: Duration,
    },
    /// Denied for good: the cost is larger than the limit can ever admit at once, so
    /// waiting will not help.
    CostExceedsCapacity,
}

/// One limit's verdict on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Admitted, denied for now, or denied for good.
    pub outcome: Outcome,
    /// The most units the limit admits at once ([`Limit::capacity`](crate::Limit::capacity)).
    pub limit: u64,
    /// Admitted: units that would still be admitted right now, after this decision.
    /// Denied: what remained when the request came (how far it was from fitting),
    /// also for a limit that charges denied requests (`count_rejected`), whose next
    /// decision shows the charge. Never more than `limit`.
    pub remaining: u64,
    /// Time until the limit's state resets: the end of the window for `fixed_window`,
    /// otherwise the time until everything charged so far has been restored.
    pub reset_after: Duration,
    /// Admitted *after a wait*: how long the request must wait before it goes ahead.
    /// Its slot is reserved at that time ([`LimitBuilder::max_wait`](crate::LimitBuilder::max_wait),
    /// `gcra` and `token_bucket`), so whoever waits it out stays within the limit.
    /// Zero for every other decision.
    pub wait: Duration,
    /// Admitted by *borrowing*: a `shares` rule let the request past its child's
    /// guarantee, from what the parent's other children leave (at once, or after
    /// `wait`). False for every other decision, and for a request its child's
    /// guarantee admitted.
    pub borrowed: bool,
    /// Denied, and *queued*: a `concurrency` limit with `max_wait` keeps the request's
    /// place in its queue (see [`Ticket`](crate::algorithm::concurrency::Ticket)); taken
    /// again with the same ticket, it is admitted at the head of the queue once a hold
    /// is given back. False for every other decision.
    pub queued: bool,
}

impl Decision {
    /// A place held for a decision made later in a round (a usage charge's).
    pub(crate) const ALLOWED_UNCHECKED: Decision = Decision {
        outcome: Outcome::Allowed,
        limit: 0,
        remaining: 0,
        reset_after: Duration::ZERO,
        wait: Duration::ZERO,
        borrowed: false,
        queued: false,
    };

    /// Whether the request fits this limit.
    #[inline]
    pub fn allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }

    /// What can still be used right now: `remaining`, but nothing after a denial that
    /// `limit` charged anyway (`count_rejected`): the charge took what was left. What
    /// headers and statuses report.
    pub fn usable(&self, limit: &crate::Limit) -> u64 {
        if !self.allowed() && limit.charges_rejected(true) {
            0
        } else {
            self.remaining
        }
    }

    /// How long until the same cost fits; `None` when allowed or when it never will.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.outcome {
            Outcome::Denied { retry_after } => Some(retry_after),
            Outcome::Allowed | Outcome::CostExceedsCapacity => None,
        }
    }
}

/// The verdict on a batch of (key, limit, cost) requests, decided all or nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchDecision {
    /// One decision per request, in request order. A limit that had room says
    /// `Allowed` even when another limit denied the batch (it was then not charged).
    pub decisions: Vec<Decision>,
    /// The first request whose limit denied the batch; `None` when the batch was admitted.
    pub denied_by: Option<usize>,
    /// Holds of `concurrency` limits this round found lapsed and cleared (holders that
    /// never gave them back): `(request index, holds)`, for the requests whose key had
    /// some. Empty, with nothing allocated, nearly always.
    pub lapsed: Vec<(usize, u64)>,
    /// Budget alerts this round's charges reached first in their windows (see
    /// [`Crossing`]). Empty, with nothing allocated, nearly always.
    pub alerts: Vec<Crossing>,
}

/// Budget alerts a round's charge reached first in its window
/// ([`LimitBuilder::alert_at`](crate::LimitBuilder::alert_at)): those of request
/// `request`'s limit from index `from` up to (not including) `to`, with `used` units
/// counted in the window after the round. Decided where the charge is, in the same
/// store call: a threshold is reached once per key and window across every server,
/// and a refund below it does not make it reached again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crossing {
    /// The request whose limit's thresholds were reached.
    pub request: usize,
    /// The first threshold reached (an index into the limit's
    /// [`alert_at`](crate::Limit::alert_at)).
    pub from: u8,
    /// One past the last.
    pub to: u8,
    /// The use counted in the window after the round.
    pub used: u64,
}

impl BatchDecision {
    /// Whether every limit admitted the batch (and all were charged).
    pub fn allowed(&self) -> bool {
        self.denied_by.is_none()
    }

    /// The longest wait until every denying limit has room again; `None` when allowed,
    /// or when some cost never fits.
    pub fn retry_after(&self) -> Option<Duration> {
        self.denied_by?;
        longest_retry(&self.decisions)
    }
}

/// The longest wait among `decisions` until every denying one has room again (zero when
/// none denies); `None` when some cost never fits. [`BatchDecision::retry_after`] of a
/// denied batch, for callers holding the decisions alone.
pub fn longest_retry(decisions: &[Decision]) -> Option<Duration> {
    let mut longest = Duration::ZERO;
    for decision in decisions {
        match decision.outcome {
            Outcome::Allowed => {}
            Outcome::Denied { retry_after } => longest = longest.max(retry_after),
            Outcome::CostExceedsCapacity => return None,
        }
    }
    Some(longest)
}
