//! One call on the wire: a decision's batch queued on its lane ([`Inner::carry`]),
//! the lane's batches sent as one call ([`Carried`]: an `FCALL`, or `EVALSHA`, sent
//! once more after "function not found" or `NOSCRIPT`; or a pipeline of plain commands
//! for the reference's rules), bounded by the store's timeout; and, when it ends
//! however it ends, the lane's next call started ([`Turn`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use spillway_core::{Error as CoreError, Key, Limit, Request, Timestamp};
use tokio::sync::oneshot;

use super::calls::{
    is_function_not_found, is_unknown_command, load_library, no_answer, refused, until_answered,
};
use super::{Calls, Inner, counter, timeout};
use crate::Error;
use crate::coalesce::{self, Batch, Failure, LaneId, Lanes, Waiting};
use crate::script::{self, LIBRARY, SCRIPT_SOURCE, Section};

/// What a lane carries, as a call: the store's lanes for it, and the call that sends
/// a lane's batches.
pub(super) trait Carried: Batch {
    fn lanes(inner: &Inner) -> &Lanes<Self>;

    fn call(
        inner: &Inner,
        batches: &[Waiting<Self>],
    ) -> impl Future<Output = Result<Value, RedisError>> + Send;
}

/// The script's batches: one `FCALL` (or `EVALSHA`) a call.
impl Carried for Section {
    fn lanes(inner: &Inner) -> &Lanes<Self> {
        &inner.scripts
    }

    fn call(
        inner: &Inner,
        batches: &[Waiting<Self>],
    ) -> impl Future<Output = Result<Value, RedisError>> + Send {
        inner.eval_sections(batches.iter().map(|w| &w.batch))
    }
}

/// The reference's counted batches: one pipeline of plain commands a call.
impl Carried for counter::Counted {
    fn lanes(inner: &Inner) -> &Lanes<Self> {
        &inner.counted
    }

    async fn call(inner: &Inner, batches: &[Waiting<Self>]) -> Result<Value, RedisError> {
        let pipe = counter::pipeline(batches.iter().map(|w| &w.batch), inner.expire_nx());
        inner
            .connection
            .query_pipeline(&pipe)
            .await
            .map(Value::Array)
    }
}

impl Inner {
    /// Carries `batch` on `lane`: at once, in a call of its own, when the lane has room
    /// for another call, or else in the call that follows one in flight. Its part of
    /// the call's reply, by `deadline`.
    pub(super) async fn carry<B: Carried>(
        self: &Arc<Inner>,
        lane: LaneId,
        batch: B,
        deadline: tokio::time::Instant,
    ) -> Result<Value, CoreError> {
        let (answer, reply) = oneshot::channel();
        if let Some(mut batches) = B::lanes(self).submit(lane, Waiting { batch, answer }) {
            // A free lane (or a second call for many waiting): these decisions go out
            // from this task, at once or, opening an idle lane, after the store's
            // window with those that came meanwhile. Finished on a task of its own if
            // this one stops waiting (a client gone): the call may carry other
            // callers' batches, and once sent its reply is theirs.
            let inner = Arc::clone(self);
            let wait = Lanes::opened(lane, &batches) && !self.window.length().is_zero();
            FinishedIfDropped(Some(Box::pin(async move {
                if wait {
                    inner.window.wait().await;
                    B::lanes(&inner).top_up(lane, &mut batches);
                }
                inner.send(lane, batches).await
            })))
            .await;
        }
        match timeout::by(deadline, self.timeouts.ceiling(), reply).await {
            Some(Ok(part)) => part.map_err(Failure::error),
            // The runtime dropped the call (shutting down).
            Some(Err(_)) => Err(CoreError::Store {
                source: "the call carrying this decision was dropped".into(),
                transient: true,
            }),
            None => Err(CoreError::Timeout(self.timeouts.current())),
        }
    }

    pub(super) async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, Failure> {
        // redis-rs's own response timeout is a backstop, later than this deadline,
        // but either way the caller sees one kind of error for "no answer in time".
        let connection = &self.connection;
        let timeout = self.timeouts.current();
        let sent = tokio::time::Instant::now();
        match timeout::by(sent + timeout, self.timeouts.ceiling(), call).await {
            Some(Err(e)) if e.is_timeout() => {
                connection.timed_out();
                self.timeouts.timed_out(timeout);
                Err(Failure::Timeout(timeout))
            }
            Some(result) => {
                connection.answered();
                self.timeouts.answered(sent.elapsed());
                result.map_err(|e| Failure::Redis(Arc::new(e)))
            }
            None => {
                connection.timed_out();
                self.timeouts.timed_out(timeout);
                Err(Failure::Timeout(timeout))
            }
        }
    }

    /// One call of the script, within `timeout`: a peek (cost 0, which writes
    /// nothing) at a key no decision uses.
    pub(super) async fn probe(&self, timeout: Duration) -> Result<(), Error> {
        let key = Key::new("spillway-probe").expect("a valid key");
        let limit = Limit::new(spillway_core::Algorithm::Gcra, 1, Duration::from_secs(1))
            .expect("a valid limit");
        let peek = [Request::new(&key, &limit, 0)];
        let keys = vec![self.layout.key(&key, &limit, Timestamp::from_secs(0))];
        let section = Section::new(keys, &peek, self.time, Timestamp::from_secs(0));
        let call = std::slice::from_ref(&section);
        let answer = until_answered(|| self.eval_sections(call.iter()));
        match tokio::time::timeout(timeout, answer).await {
            // The batch's own failure (a command the script calls, refused) is a
            // string in the reply, not an error reply.
            Ok(Ok(value)) => {
                match script::split_reply(value, std::iter::once(script::reply_len(peek.len(), 0)))
                {
                    Ok(mut parts) => script::parse_reply(parts.remove(0), &peek)
                        .map(drop)
                        .map_err(|e| refused(e.to_string(), e.is_transient())),
                    Err(why) => Err(refused(format!("unexpected reply: {why}"), false)),
                }
            }
            Ok(Err(e)) => Err(refused(e.to_string(), crate::error::is_transient(&e))),
            Err(_) => Err(no_answer(timeout)),
        }
    }

    /// Sends one call of `lane`. When it ends, or its sender stops waiting for it, the
    /// batches that arrived meanwhile go out in the lane's next call, on a task of its
    /// own ([`Turn`]).
    async fn send<B: Carried>(self: &Arc<Inner>, lane: LaneId, batches: Vec<Waiting<B>>) {
        let _turn = Turn::<B> {
            inner: Arc::clone(self),
            lane,
            carries: PhantomData,
        };
        let reply = self.bounded(B::call(self, &batches)).await;
        coalesce::answer(batches, reply);
    }

    /// Whether the server takes `PEXPIRE … NX`, which came with functions, in Redis 7.0.
    fn expire_nx(&self) -> bool {
        matches!(self.calls, Calls::Function { .. }) && !self.functions_lost.load(Ordering::Relaxed)
    }

    /// Sends the `PEXPIRE`s of the window keys a counted batch found gone (`lost`,
    /// [`counter::decide`]) by `deadline` (the decision's own), and once they are set
    /// remembers them. If this fails the keys stay unknown, so the next decision on
    /// each sends its `PEXPIRE` again.
    pub(super) async fn expire_again(
        &self,
        requests: &[Request<'_>],
        windows: &[counter::Window],
        lost: &[usize],
        now: Timestamp,
        deadline: tokio::time::Instant,
    ) {
        let keys = lost.iter().map(|&i| {
            let r = &requests[i];
            (self.layout.key(r.key, r.limit, now), &windows[i])
        });
        let pipe = counter::expire_again(keys, self.expire_nx());
        match tokio::time::timeout_at(deadline, self.connection.query_pipeline(&pipe)).await {
            Ok(Ok(_)) => counter::expired_again(windows, lost, &self.expiring),
            failed => tracing::warn!(
                answer = ?failed.map(drop),
                "a window key found gone was created again and its TTL could not be set \
                 by the decision's deadline; the next decision on it sends the TTL again"
            ),
        }
    }

    /// FCALL, and on "function not found" the library loaded again and one more FCALL;
    /// or EVALSHA, and on NOSCRIPT one EVAL of the source (which caches it again).
    async fn eval_sections<'a>(
        &self,
        sections: impl Iterator<Item = &'a Section> + Clone,
    ) -> Result<Value, RedisError> {
        let connection = &self.connection;
        if matches!(self.calls, Calls::Function { .. })
            && !self.functions_lost.load(Ordering::Relaxed)
        {
            let fcall = script::call("FCALL", &LIBRARY.function, sections.clone());
            match connection.query(&fcall).await {
                Err(e) if is_function_not_found(&e) => {
                    load_library(connection).await?;
                    return connection.query(&fcall).await;
                }
                Err(e) if is_unknown_command(&e) => {
                    tracing::warn!(
                        "Redis no longer knows FCALL (a failover to an older server?): \
                         decisions go as scripts from now on"
                    );
                    self.functions_lost.store(true, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        match connection
            .query(&script::call("EVALSHA", &LIBRARY.sha, sections.clone()))
            .await
        {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                connection
                    .query(&script::call("EVAL", SCRIPT_SOURCE, sections))
                    .await
            }
            other => other,
        }
    }
}

/// A call sent from its caller's task, boxed (the call's future is large, and most
/// decisions never start one); dropped before it ended, it is finished on a task of
/// its own (with no runtime left, dropped: its callers see their call dropped).
struct FinishedIfDropped(Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>);

impl Future for FinishedIfDropped {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let Some(call) = self.0.as_mut() else {
            return std::task::Poll::Ready(());
        };
        let done = call.as_mut().poll(cx);
        if done.is_ready() {
            self.0 = None;
        }
        done
    }
}

impl Drop for FinishedIfDropped {
    fn drop(&mut self) {
        if let Some(call) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(call);
        }
    }
}

/// A call in flight on a lane. Ending it, however it ends, starts the lane's next
/// call if batches are waiting: the caller that sent this one may stop waiting (its
/// timeout, a client gone), and the batches behind it must not wait for another
/// caller to come by.
struct Turn<B: Carried> {
    inner: Arc<Inner>,
    lane: LaneId,
    carries: PhantomData<fn() -> B>,
}

impl<B: Carried> Drop for Turn<B> {
    fn drop(&mut self) {
        let lanes = B::lanes(&self.inner);
        let Some(next) = lanes.next(self.lane) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (inner, lane) = (Arc::clone(&self.inner), self.lane);
                runtime.spawn(async move {
                    let mut next = next;
                    for _ in 0..4 {
                        tokio::task::yield_now().await;
                        let had = next.len();
                        B::lanes(&inner).top_up(lane, &mut next);
                        if next.len() == had {
                            break;
                        }
                    }
                    inner.send(lane, next).await
                });
            }
            // No runtime left to send on: the waiting callers see their call dropped.
            Err(_) => {
                drop(next);
                while lanes.next(self.lane).is_some() {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
