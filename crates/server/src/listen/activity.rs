//! What a connection is doing, for its idle timeout: the requests in flight on it (each
//! one until its response body ends or is dropped), and when the last one started or
//! ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

/// What one connection is doing: requests in flight, and when the last one started or
/// ended (on tokio's clock, as every network timeout here).
pub(super) struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    /// Since `born`, in milliseconds.
    last: AtomicU64,
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last: AtomicU64::new(0),
        }
    }

    pub(super) fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    /// When the connection will have been idle for `idle`, if nothing happens first;
    /// `None` when there is no idle timeout.
    pub(super) fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        if idle.is_zero() {
            return None;
        }
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        Some(self.born + last + idle)
    }

    /// No request in flight, and none started or ended for `idle`.
    pub(super) fn idle_for(&self, idle: Duration) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
            && self
                .idle_deadline(idle)
                .is_some_and(|at| at <= Instant::now())
    }
}

/// One request in flight on a connection, from its arrival until its response body
/// ends or is dropped.
pub(super) struct Busy(Arc<Activity>);

impl Busy {
    pub(super) fn start(activity: Arc<Activity>) -> Busy {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.touch();
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request in flight until it is done.
    pub(super) struct Tracked<B> {
        #[pin]
        pub(super) body: B,
        pub(super) _busy: Busy,
    }
}

impl<B: http_body::Body> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
