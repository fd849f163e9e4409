//! `ResponseFuture`: the decision, then (if admitted) the inner service's response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use crate::ResponseBody;

type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

/// The future [`RateLimit`](crate::RateLimit) returns.
///
/// One allocation per request: the decision borrows the request's keys across the
/// store call, which only a boxed `async` block can name on stable Rust.
pub struct ResponseFuture<B, E> {
    inner: Boxed<B, E>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new(
        f: impl Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static,
    ) -> Self {
        ResponseFuture { inner: Box::pin(f) }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
