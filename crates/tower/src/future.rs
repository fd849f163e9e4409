//! `ResponseFuture`: the decision, then (if admitted) the inner service's response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;

use crate::respond::{Headers, add_headers};

type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

pin_project! {
    /// The future [`RateLimit`](crate::RateLimit) returns: `F` is the inner service's.
    ///
    /// Where the store decides at once (the memory store) nothing is allocated: the
    /// future is the inner service's, or the layer's own answer. Where it must wait
    /// (Redis), one allocation: the decision borrows the request's keys across the
    /// store call, which only a boxed `async` block can name on stable Rust.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        // Admitted at once: the inner service's future, and the headers its response
        // gets.
        Inner { #[pin] future: F, headers: Headers },
        // Answered by the layer at once (a rejection, a shadow-ban answer).
        Ready { response: Option<Response<B>> },
        // Decided after waiting for the store.
        Waiting { future: Boxed<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn inner(future: F, headers: Headers) -> Self {
        ResponseFuture {
            kind: Kind::Inner { future, headers },
        }
    }

    pub(crate) fn ready(response: Response<B>) -> Self {
        ResponseFuture {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }

    pub(crate) fn waiting(
        f: impl Future<Output = Result<Response<B>, E>> + Send + 'static,
    ) -> Self {
        ResponseFuture {
            kind: Kind::Waiting {
                future: Box::pin(f),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future, headers } => {
                let mut response = ready!(future.poll(cx))?;
                add_headers(response.headers_mut(), std::mem::take(headers));
                Poll::Ready(Ok(response))
            }
            KindProj::Ready { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
