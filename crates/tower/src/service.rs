//! `RateLimit<S>`: the service the layer wraps around yours. Each request is decided
//! first; only an admitted one (or any, in shadow mode) reaches the inner service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use spillway_core::{Clock, CoarseClock, Store};
use tower::Service;

use crate::hold::HoldSlot;
use crate::respond::add_headers;
use crate::shared::{Shared, Verdict};
use crate::{LayerBody, ResponseFuture};

/// Rate limits the requests to `S`. Made by [`RateLimitLayer`](crate::RateLimitLayer);
/// clones share their limits.
pub struct RateLimit<S, St, C = CoarseClock> {
    inner: S,
    shared: Arc<Shared<St, C>>,
}

impl<S, St, C> RateLimit<S, St, C> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<St, C>>) -> Self {
        RateLimit { inner, shared }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, St, C, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, St, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    St: Store + 'static,
    C: Clock + 'static,
    ReqBody: Send + 'static,
    ResBody: LayerBody + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let metered = self.shared.metered;
        // Decided at once (the memory store): the inner service, polled ready, is
        // called now, and nothing is boxed. A metered request is settled after the
        // inner service answered, a held one gives its holds back when its response
        // ends: always the path below.
        let now = if metered {
            None
        } else {
            self.shared.decide_now(&parts)
        };
        match now {
            Some(Verdict::Allow(headers, wait)) if wait.is_zero() => {
                let future = self.inner.call(Request::from_parts(parts, body));
                return ResponseFuture::inner(future, headers);
            }
            Some(Verdict::Refuse(refusal)) => {
                return ResponseFuture::ready(self.shared.answer(refusal, &parts));
            }
            // Admitted after a wait: the call waits below.
            Some(Verdict::Allow(headers, wait)) => {
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                return ResponseFuture::waiting(async move {
                    tokio::time::sleep(wait).await;
                    let mut response = inner.call(Request::from_parts(parts, body)).await?;
                    add_headers(response.headers_mut(), headers);
                    Ok(response)
                });
            }
            None => {}
        }
        // The service that was polled ready goes into the future; this one keeps a
        // fresh clone for the next call (tower's guidance for services that must be
        // called after an await).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        ResponseFuture::waiting(async move {
            let (verdict, reserved, holding) = if metered {
                let (verdict, reserved, holding) = shared.reserve(&parts).await;
                (verdict, Some(reserved), holding)
            } else {
                let (verdict, holding) = shared.decide(&parts).await;
                (verdict, None, holding)
            };
            match verdict {
                Verdict::Allow(headers, wait) => {
                    // Admitted after a wait (a rule's `max_wait`): its slot is at the
                    // wait's end.
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    // The holding waits in the request for a service that upgrades
                    // the connection to take. An error, or this future dropped (the
                    // client gone), drops it too: the holds are given back.
                    let mut request = Request::from_parts(parts, body);
                    let slot = holding.map(HoldSlot::new);
                    if let Some(slot) = &slot {
                        request.extensions_mut().insert(slot.clone());
                    }
                    let mut response = inner.call(request).await?;
                    if let Some(reserved) = reserved {
                        shared.settle(reserved, response.headers()).await;
                    }
                    add_headers(response.headers_mut(), headers);
                    Ok(match slot.as_ref().and_then(HoldSlot::take) {
                        Some(holding) => response.map(|body| body.holding(holding)),
                        None => response,
                    })
                }
                Verdict::Refuse(refusal) => Ok(shared.answer(refusal, &parts)),
            }
        })
    }
}

impl<S: Clone, St, C> Clone for RateLimit<S, St, C> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, St, C> fmt::Debug for RateLimit<S, St, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("rules", &self.shared.rules)
            .finish_non_exhaustive()
    }
}
