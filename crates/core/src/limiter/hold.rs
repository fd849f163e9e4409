//! Holds of a `concurrency` limit: taken, renewed and given back through the
//! [`Limiter`], and [`Hold`], the guard that gives its hold back when dropped.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::store::{Request, Store};
use crate::{Clock, Decision, Error, Key, Limit};

use super::Limiter;

impl<S: Store, C: Clock> Limiter<S, C> {
    /// Takes `holds` slots of `key`'s `concurrency` limit under the hold named `id` (a
    /// request id): admitted while the holds live stay within the limit, each lapsing
    /// on its own a lease after it was taken. An `id` names a hold, it never lets one
    /// in: taking an `id` already held is one more hold (a retried take counts twice
    /// unless the first is given back); [`renew`](Limiter::renew) renews.
    pub fn acquire<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
        id: &'a [u8],
        holds: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_request(Request::new(key, limit, holds).with_member(id))
    }

    /// Renews `key`'s hold named `id` (of `holds` slots): its lease starts again from
    /// now. Denied only when the hold had lapsed and its slots were taken meanwhile
    /// (it is taken again if they are free).
    pub fn renew<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
        id: &'a [u8],
        holds: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_request(Request::renew(key, limit, id, holds))
    }

    /// Gives back `key`'s hold named `id`: its slots are free at once. Giving back a
    /// hold no longer held (given back already, lapsed) changes nothing. The decision
    /// is a look after it.
    pub fn release<'a>(
        &'a self,
        key: &'a Key,
        limit: &'a Limit,
        id: &'a [u8],
    ) -> impl Future<Output = Result<Decision, Error>> + Send + 'a {
        self.check_request(Request::release(key, limit, id))
    }
}

impl<S: Store + Clone + 'static, C: Clock + Clone + 'static> Limiter<S, C> {
    /// Takes `holds` slots of `key`'s `concurrency` limit under a new id, and returns
    /// the decision and, when admitted, the [`Hold`] that gives them back when it is
    /// dropped (or by [`Hold::release`], awaited). The hold is armed before the store
    /// call: a future dropped during it, or a call the store did not answer (a
    /// timed-out take may have committed), gives back what it may have taken.
    pub async fn hold(
        &self,
        key: &Key,
        limit: &Limit,
        holds: u64,
    ) -> Result<(Decision, Option<Hold<S, C>>), Error> {
        let mut hold = Hold {
            held: Some(Arc::new(Held {
                limiter: self.clone(),
                key: key.clone(),
                limit: limit.clone(),
                id: new_id(),
                holds,
            })),
            renewing: None,
        };
        let h = Arc::clone(hold.held());
        // An error drops `hold`: given back, in case the store took it.
        let decision = self.acquire(key, limit, &h.id, holds).await?;
        if !decision.allowed() {
            // Denied: nothing taken (a new id leaves no mark).
            hold.held = None;
            return Ok((decision, None));
        }
        Ok((decision, Some(hold)))
    }
}

/// A hold of a `concurrency` limit, given back when dropped: in the drop on the memory
/// store; on a store that must wait (Redis), by a task on the runtime the drop happens
/// on (with none, the hold lapses at the end of its lease). [`release`](Hold::release)
/// gives it back and waits for the store. A hold lapses a lease after it was taken
/// unless renewed: by [`renew`](Hold::renew), or every half lease by a task once
/// [`keep_renewed`](Hold::keep_renewed) (a job longer than the lease keeps its slot).
#[must_use = "a hold is given back when dropped: bind it for as long as the work runs"]
#[derive(Debug)]
pub struct Hold<S: Store + Clone + 'static, C: Clock + Clone + 'static> {
    held: Option<Arc<Held<S, C>>>,
    /// The task that renews the hold ([`keep_renewed`](Hold::keep_renewed)).
    renewing: Option<Renewing>,
}

#[derive(Debug)]
struct Held<S, C> {
    limiter: Limiter<S, C>,
    key: Key,
    limit: Limit,
    id: Box<[u8]>,
    holds: u64,
}

impl<S: Store + Clone + 'static, C: Clock + Clone + 'static> Hold<S, C> {
    fn held(&self) -> &Arc<Held<S, C>> {
        self.held.as_ref().expect("held until released or dropped")
    }

    /// The hold's id: what the store keeps it under.
    pub fn id(&self) -> &[u8] {
        &self.held().id
    }

    /// Renews the hold: its lease starts again from now. Denied only when the hold
    /// had lapsed and its slots were taken meanwhile (then it is taken again if they
    /// are free).
    pub async fn renew(&self) -> Result<Decision, Error> {
        let h = self.held();
        h.limiter.renew(&h.key, &h.limit, &h.id, h.holds).await
    }

    /// Renews the hold every half lease for as long as it is held, by a task on the
    /// Tokio runtime this is called on (with none, it does nothing: the hold lapses a
    /// lease after its last renewal). For work that may outlast the lease: a long job,
    /// a stream. A renewal the store did not answer is tried again half a lease later.
    /// Once the hold is released or dropped, no renewal follows its release (one on
    /// its way is answered first): a renewal never takes back a slot given back.
    pub fn keep_renewed(mut self) -> Self {
        if self.renewing.is_some() {
            return self;
        }
        let h = Arc::clone(self.held());
        let period = (h.limit.window() / 2).max(Duration::from_millis(1));
        self.renewing = keep_renewed(period, move || {
            let h = Arc::clone(&h);
            async move {
                // Denied or failed, it is tried again at the next tick.
                let _ = h.limiter.renew(&h.key, &h.limit, &h.id, h.holds).await;
            }
        });
        self
    }

    /// Gives the hold back and waits for the store: the decision is a look after it.
    pub async fn release(mut self) -> Result<Decision, Error> {
        let h = self.held.take().expect("held until released or dropped");
        if let Some(renewing) = self.renewing.take() {
            // Released once no renewal is on its way.
            let (ready, stopped) = tokio::sync::oneshot::channel();
            renewing.stop_then(move || {
                let _ = ready.send(());
            });
            let _ = stopped.await;
        }
        h.limiter.release(&h.key, &h.limit, &h.id).await
    }
}

impl<S: Store + Clone + 'static, C: Clock + Clone + 'static> Drop for Hold<S, C> {
    fn drop(&mut self) {
        let Some(h) = self.held.take() else {
            return;
        };
        let local = h.limiter.store().is_local();
        let release = move || {
            release_detached(local, async move {
                // A release that fails has nobody left to tell: the lease frees the
                // slots.
                let _ = h.limiter.release(&h.key, &h.limit, &h.id).await;
            });
        };
        match self.renewing.take() {
            Some(renewing) => renewing.stop_then(release),
            None => release(),
        }
    }
}

/// A task that renews a hold every period ([`keep_renewed`]) until
/// [`stop_then`](Renewing::stop_then) (or a drop, which gives nothing back) stops it.
#[derive(Debug)]
pub struct Renewing {
    state: Arc<std::sync::Mutex<RenewalState>>,
    task: tokio::task::AbortHandle,
}

#[derive(Default)]
struct RenewalState {
    /// A renewal is on its way to the store.
    renewing: bool,
    stopped: bool,
    /// What runs once the renewal on its way is answered: the release.
    then: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for RenewalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewalState")
            .field("renewing", &self.renewing)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

fn lock(state: &std::sync::Mutex<RenewalState>) -> std::sync::MutexGuard<'_, RenewalState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Renewing {
    /// Stops renewing, then runs `release`: now when no renewal is on its way (a store
    /// in this process gives the hold back in the caller's drop, as without renewal),
    /// otherwise once it is answered — a renewal never follows the release and takes
    /// the hold again.
    pub fn stop_then(self, release: impl FnOnce() + Send + 'static) {
        let mut state = lock(&self.state);
        state.stopped = true;
        if state.renewing {
            state.then = Some(Box::new(release));
            return;
        }
        drop(state);
        self.task.abort();
        release();
    }
}

impl Drop for Renewing {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if !state.stopped {
            state.stopped = true;
            if !state.renewing {
                self.task.abort();
            }
        }
    }
}

/// Runs `renew` every `period` (the first a period from now, each next one a period
/// after the last was answered) by a task on the caller's Tokio runtime, until the
/// [`Renewing`] returned is stopped or dropped; `None` without a runtime (nothing
/// runs). For holds that must outlive their lease: [`Hold::keep_renewed`], and the
/// tower layer's hold of a response that streams.
pub fn keep_renewed<R, F>(period: Duration, mut renew: R) -> Option<Renewing>
where
    R: FnMut() -> F + Send + 'static,
    F: Future<Output = ()> + Send,
{
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let state = Arc::new(std::sync::Mutex::new(RenewalState::default()));
    let shared = Arc::clone(&state);
    let task = runtime.spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            {
                let mut state = lock(&shared);
                if state.stopped {
                    return;
                }
                state.renewing = true;
            }
            renew().await;
            let mut state = lock(&shared);
            state.renewing = false;
            if state.stopped {
                let then = state.then.take();
                drop(state);
                if let Some(release) = then {
                    release();
                }
                return;
            }
        }
    });
    Some(Renewing {
        state,
        task: task.abort_handle(),
    })
}

/// Runs `release` (a hold given back) without waiting for it: here, at once, when the
/// store is `local` (in this process: its future is ready when first polled);
/// otherwise as a task on the runtime of the caller; with none, nowhere (the hold's
/// lease frees its slots). For guards given back on drop: [`Hold`], and the tower
/// layer's hold of a response.
pub fn release_detached(local: bool, release: impl Future<Output = ()> + Send + 'static) {
    let mut release = Box::pin(release);
    if local {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if release.as_mut().poll(&mut cx).is_ready() {
            return;
        }
    }
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(release);
    }
}

/// A new hold id: 16 hex digits random for the process, then a counter; unique among
/// the holds of every process.
pub fn new_id() -> Box<[u8]> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static PROCESS: std::sync::LazyLock<u64> =
        std::sync::LazyLock::new(|| RandomState::new().hash_one(std::process::id()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:016x}-{n:x}", *PROCESS).into_bytes().into()
}
