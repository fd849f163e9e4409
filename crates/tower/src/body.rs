//! Bodies the layer can answer with: a refused request's answer (a 429's explanation,
//! a shadow-ban answer) is written in the inner service's own body type, so that an
//! admitted response passes through as it is — no wrapper for the framework to box
//! again (axum boxes every body that is not its own: a tenth of a microsecond a
//! request). [`LayerBody`] says how; [`ResponseBody`] adapts any other body.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Full};
use pin_project_lite::pin_project;

use crate::hold::{HeldBody, Holding, release_at_end};

pin_project! {
    /// The inner service's body, or the layer's own.
    #[project = Proj]
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        // The request's holds, given back when the body ends.
        holding: Option<Holding>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Own { data: Option<Bytes> },
    }
}

/// A response body the layer can write its own answers in: from bytes (a 429's JSON,
/// a shadow-ban answer), or empty ([`Default`]: a gRPC answer carries everything in
/// headers). Implemented for axum's and tonic's bodies, `http_body_util`'s `Full`,
/// `BoxBody` and `UnsyncBoxBody`, `String`, and [`ResponseBody`], which wraps any
/// other body (`map_response(|r| r.map(ResponseBody::new))` on the inner service).
pub trait LayerBody: Default {
    /// A body holding `bytes`.
    fn from_bytes(bytes: Bytes) -> Self;

    /// This body, carrying the request's holds of `concurrency` limits until it ends
    /// or is dropped (a stream, a download, a gRPC stream). The default gives them back
    /// now, for bodies that are whole when the service answers (`Full`, `String`).
    fn holding(self, holding: Holding) -> Self {
        drop(holding);
        self
    }
}

impl<B> LayerBody for ResponseBody<B> {
    fn from_bytes(bytes: Bytes) -> Self {
        ResponseBody::own(bytes)
    }

    fn holding(mut self, holding: Holding) -> Self {
        self.holding = Some(holding);
        self
    }
}

#[cfg(feature = "axum")]
impl LayerBody for axum::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        axum::body::Body::from(bytes)
    }

    fn holding(self, holding: Holding) -> Self {
        axum::body::Body::new(HeldBody::new(self, holding))
    }
}

#[cfg(feature = "tonic")]
impl LayerBody for tonic::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        tonic::body::Body::new(Full::new(bytes))
    }

    fn holding(self, holding: Holding) -> Self {
        tonic::body::Body::new(HeldBody::new(self, holding))
    }
}

impl LayerBody for Full<Bytes> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
    }
}

impl LayerBody for String {
    fn from_bytes(bytes: Bytes) -> Self {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl<E: 'static> LayerBody for BoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes).map_err(|never| match never {}).boxed()
    }

    fn holding(self, holding: Holding) -> Self {
        HeldBody::new(self, holding).boxed()
    }
}

impl<E: 'static> LayerBody for UnsyncBoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never| match never {})
            .boxed_unsync()
    }

    fn holding(self, holding: Holding) -> Self {
        HeldBody::new(self, holding).boxed_unsync()
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's body, for a service whose body type is not a
    /// [`LayerBody`] of its own.
    pub fn new(body: B) -> Self {
        ResponseBody::inner(body)
    }

    pub(crate) fn inner(body: B) -> Self {
        ResponseBody {
            kind: Kind::Inner { body },
            holding: None,
        }
    }

    pub(crate) fn own(data: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Own {
                data: (!data.is_empty()).then_some(data),
            },
            holding: None,
        }
    }
}

/// Empty (gRPC answers carry everything in headers).
impl<B> Default for ResponseBody<B> {
    fn default() -> Self {
        ResponseBody::own(Bytes::new())
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let Proj { kind, holding } = self.project();
        let frame = match kind.project() {
            KindProj::Inner { body } => std::task::ready!(body.poll_frame(cx)),
            KindProj::Own { data } => data.take().map(|d| Ok(Frame::data(d))),
        };
        release_at_end(holding, &frame);
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Own { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Own { data } => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
        }
    }
}
