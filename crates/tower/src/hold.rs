//! A response's holds of `concurrency` limits: taken with the request's other limits,
//! renewed every half lease while held, given back when the response body ends or is
//! dropped ([`Holding`], carried by the body:
//! [`LayerBody::holding`](crate::LayerBody::holding)), or kept by the service for an
//! upgraded connection ([`HoldSlot`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// The holds one admitted request took, renewed every half lease while this lives (by
/// a task on the runtime) and given back when it is dropped: at once on a store in this
/// process, by a task on the runtime on Redis (or, with neither, at the end of the
/// holds' lease). Carried by the response body for as long as it streams, or by what
/// took it from the request's [`HoldSlot`].
pub struct Holding(Option<Box<dyn FnOnce() + Send + Sync>>);

impl Holding {
    pub(crate) fn new(release: impl FnOnce() + Send + Sync + 'static) -> Holding {
        Holding(Some(Box::new(release)))
    }

    /// Drops it without giving anything back: nothing was taken.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }

    /// The same holds, renewed by `renew` every `period` until this is dropped, then
    /// given back (after any renewal on its way: a renewal never follows the release).
    /// Without a runtime, not renewed.
    pub(crate) fn renewing<R, F>(mut self, period: Duration, renew: R) -> Holding
    where
        R: FnMut() -> F + Send + 'static,
        F: Future<Output = ()> + Send,
    {
        let Some(release) = self.0.take() else {
            return self;
        };
        match spillway_core::keep_renewed(period, renew) {
            Some(renewing) => Holding::new(move || renewing.stop_then(release)),
            None => Holding(Some(release)),
        }
    }
}

/// Where an admitted request's [`Holding`] waits, in the request's extensions, while the
/// service answers: a service that upgrades the connection (a WebSocket, a 101) takes it
/// and keeps it for as long as the upgraded connection lives (renewed meanwhile).
/// Left here, the holding goes with the response's body, and a 101's empty body gives
/// it back at once.
#[derive(Clone, Debug, Default)]
pub struct HoldSlot(Arc<Mutex<Option<Holding>>>);

impl HoldSlot {
    pub(crate) fn new(holding: Holding) -> HoldSlot {
        HoldSlot(Arc::new(Mutex::new(Some(holding))))
    }

    /// The request's holds, for the caller to keep (given back when dropped); `None`
    /// once taken.
    pub fn take(&self) -> Option<Holding> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Gives `holding` back once `frame` says its body is over: its last frame was read
/// (`None`), or it failed. The rule every body that carries holds follows.
pub(crate) fn release_at_end<E>(
    holding: &mut Option<Holding>,
    frame: &Option<Result<Frame<Bytes>, E>>,
) {
    if !matches!(frame, Some(Ok(_))) {
        holding.take();
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            release();
        }
    }
}

impl std::fmt::Debug for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Holding")
    }
}

pin_project! {
    /// A body that gives its request's holds back when it ends (its last frame, or an
    /// error) or is dropped.
    #[derive(Debug)]
    pub(crate) struct HeldBody<B> {
        #[pin]
        body: B,
        holding: Option<Holding>,
    }
}

impl<B> HeldBody<B> {
    pub(crate) fn new(body: B, holding: Holding) -> Self {
        HeldBody {
            body,
            holding: Some(holding),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for HeldBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.body.poll_frame(cx));
        release_at_end(this.holding, &frame);
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
