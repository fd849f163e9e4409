//! A take waiting in a `concurrency` rule's queue for a release (the rule's
//! `max_wait`): its place is kept in the store, first come first served across every
//! replica; here the service holds its answer and asks again with the same ticket
//! whenever a hold is given back on this replica, and at least every
//! [`poll`] (one given back on another replica, or lapsed), until it is admitted or
//! its wait is up. Then a last try: admitted at its place if it fits, else refused,
//! out of the queue, with `retry_after`. A caller that goes away meanwhile is given
//! back by `GiveBack` (its waiter leaves the queue, or the hold it got is given back).

use std::pin::Pin;
use std::time::Duration;

use spillway_core::TicketKind;
use tokio::sync::futures::Notified;

use super::AppState;
use crate::metrics;
use crate::service::request::{CheckResponse, Code, Valid};
use crate::service::{CheckError, Checked};

/// How often a waiting take asks again when nothing on this replica wakes it: an
/// eighth of its wait, at least 10 ms (a store call each) and at most 250 ms (well
/// within the waiter's grace in the store, two seconds).
pub(crate) fn poll(max_wait: Duration) -> Duration {
    (max_wait / 8).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

impl AppState {
    /// Waits in the queue for `req`, whose first answer kept it a place, up to
    /// `max_wait` (`None`: something else denied it, so waiting cannot admit it),
    /// holding the answer on `api`. `released` is armed before that first answer: a
    /// release since is not missed.
    pub(super) async fn wait_in_queue<'s>(
        &'s self,
        req: &Valid,
        max_wait: Option<Duration>,
        api: &'static str,
        mut released: Pin<&mut Notified<'s>>,
    ) -> Result<(CheckResponse, Checked), CheckError> {
        let service = &self.service;
        // A permit per answer held, as for a rate rule's wait (`max_waiters`).
        let permit = max_wait.and_then(|_| self.waiters.try_acquire().ok());
        if max_wait.is_some() && permit.is_none() {
            metrics::wait_refused(api);
        }
        let max_wait = max_wait.unwrap_or_default();
        let started = tokio::time::Instant::now();
        let deadline = started + max_wait;
        let _waiting = permit.as_ref().map(|_| metrics::Waiting::new(api));
        while permit.is_some() {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            tokio::select! {
                () = released.as_mut() => {}
                () = tokio::time::sleep(poll(max_wait).min(deadline - now)) => {}
            }
            released.set(service.released().notified());
            released.as_mut().enable();
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            let answer = service.checked(req, None).await?;
            match answer.0.queued {
                None => return Ok(counted(answer, api, started)),
                Some(_) if answer.0.may_wait_in_queue() => {}
                // Something else denies it now: its place goes with a last try.
                Some(_) => break,
            }
        }
        // Its wait is up, or it may not wait: a last try, admitted at its place or
        // refused and out of the queue.
        let last = req.ticket_doing(TicketKind::Last);
        Ok(counted(service.checked(&last, None).await?, api, started))
    }
}

/// An answer after a wait in a queue: an admission's wait is in `spillway_wait_seconds`.
fn counted(
    answer: (CheckResponse, Checked),
    api: &'static str,
    started: tokio::time::Instant,
) -> (CheckResponse, Checked) {
    if answer.0.overall == Code::Ok {
        metrics::waited(api, started.elapsed());
    }
    answer
}
