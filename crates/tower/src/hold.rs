//! A response's holds of `concurrency` limits: taken with the request's other limits,
//! given back when the response body ends or is dropped ([`Holding`], carried by the
//! body: [`LayerBody::holding`](crate::LayerBody::holding)).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// The holds one admitted request took, given back when this is dropped: at once on a
/// store in this process, by a task on the runtime on Redis (or, with neither, at the
/// end of the holds' lease). Carried by the response body for as long as it streams.
pub struct Holding(Option<Box<dyn FnOnce() + Send + Sync>>);

impl Holding {
    pub(crate) fn new(release: impl FnOnce() + Send + Sync + 'static) -> Holding {
        Holding(Some(Box::new(release)))
    }

    /// Drops it without giving anything back: nothing was taken.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
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
