//! Coalesced calls: decisions that arrive while calls are in flight wait on their
//! lane and go out together, as the batches of one call. The queue is the same for
//! whatever a lane carries ([`Batch`]: the script's batches, `script.rs`, or the
//! reference's counted ones, `store/counter.rs`); what a call is and how its reply
//! splits belong to what it carries, and the call itself is `store/call.rs`.
//!
//! A lane is what one call may span: the whole server on standalone and Sentinel, one
//! hash slot on Cluster (Redis refuses a script whose KEYS span slots, even slots of
//! one node, and even with the `allow-cross-slot-keys` flag, which only covers keys a
//! script reaches without declaring them). A decision that finds its lane idle goes
//! out at once, alone (no added latency when idle); one that finds a call in flight
//! waits for it to end, and the next call takes everything waiting up to
//! [`MAX_BATCHES`] batches and [`MAX_KEYS`] keys. A lane sends a second call while one
//! is in flight (at most [`CALLS_PER_LANE`]) only once [`SECOND_CALL_AT`] batches wait:
//! a call costs Redis more than the decisions in it. A decision whose
//! caller stopped waiting (its timeout) is dropped before it is sent: never charged.
//!
//! At everyday rates a lane is mostly idle and each decision goes alone. A store with
//! a window (`coalesce/window.rs`, off by default) lets the decision that opens an
//! idle lane wait it out before its call goes, taking along whatever arrived
//! meanwhile: fewer calls for Redis, the window's length added to those decisions.
//!
//! A call decides its batches in order, each as it would alone; one that fails fails
//! alone (see `scripts/round.lua`, and `store/counter.rs` for a pipeline's).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::cluster_routing::Slot;
use redis::{RedisError, Value};
use tokio::sync::oneshot;

use crate::error::{is_transient, unexpected};

pub(crate) mod window;

/// Calls in flight per lane: Redis runs one while the next is on the wire, and the
/// decisions that arrive meanwhile wait for the first to end.
pub(crate) const CALLS_PER_LANE: usize = 2;

/// Batches that must be waiting before a lane with a call in flight sends a second
/// one. Below it they wait for the call in flight to end, and go out together: a call
/// costs Redis far more than a decision in it (measured through the service, where
/// the service's CPU, not Redis, paces the decisions: a second call for whatever
/// waited took 8.2 decisions a call to 5.1 and Redis CPU per decision from 12.5 µs to
/// 15.5; `CALLS_PER_LANE` 1 lost 29% of the store's own throughput).
pub(crate) const SECOND_CALL_AT: usize = 16;

/// The most batches one call carries.
pub(crate) const MAX_BATCHES: usize = 64;

/// The most keys one call carries (a larger batch still goes, alone).
pub(crate) const MAX_KEYS: usize = 512;

/// What a lane carries: one decision's batch, of which a call takes several.
pub(crate) trait Batch: Sized + Send + 'static {
    /// Redis keys the batch names (a call's cap, [`MAX_KEYS`]).
    fn keys(&self) -> usize;

    /// Splits a call's reply into one part per batch of `batches`, in order; or says
    /// why the reply does not fit them.
    fn split(reply: Value, batches: &[Waiting<Self>]) -> Result<Vec<Value>, String>;
}

/// One batch waiting for its call, and where its part of the reply goes.
#[derive(Debug)]
pub(crate) struct Waiting<B> {
    pub(crate) batch: B,
    pub(crate) answer: oneshot::Sender<Result<Value, Failure>>,
}

/// Why a whole call failed, for each batch it carried.
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// No answer within the store's timeout.
    Timeout(Duration),
    /// Redis or the connection failed.
    Redis(Arc<RedisError>),
    /// The reply was not one element per batch.
    Reply(Arc<str>),
}

impl Failure {
    pub(crate) fn error(self) -> spillway_core::Error {
        match self {
            Failure::Timeout(after) => spillway_core::Error::Timeout(after),
            Failure::Redis(e) => spillway_core::Error::Store {
                transient: is_transient(&e),
                source: Box::new(e),
            },
            Failure::Reply(why) => unexpected(why),
        }
    }
}

/// A lane: the slot on Cluster (`None`, the one lane, elsewhere), and how its calls
/// take batches.
pub(crate) type LaneId = (Option<Slot>, Kind);

/// How a lane's calls take batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// As many as a call's caps allow, [`CALLS_PER_LANE`] calls at a time.
    Light,
    /// Heavy batches ([`spillway_core::is_heavy`]), each in a call of its own, one call
    /// at a time on its lane: light batches never wait in a call that carries one,
    /// and Redis, which runs one script at a time, runs light calls between heavy
    /// ones.
    Heavy,
}

/// The lanes of one store for one kind of batch.
#[derive(Debug)]
pub(crate) struct Lanes<B> {
    lanes: Mutex<HashMap<LaneId, Lane<B>>>,
}

impl<B> Default for Lanes<B> {
    fn default() -> Self {
        Lanes {
            lanes: Mutex::default(),
        }
    }
}

#[derive(Debug)]
struct Lane<B> {
    waiting: VecDeque<Waiting<B>>,
    calls: usize,
}

impl<B> Default for Lane<B> {
    fn default() -> Self {
        Lane {
            waiting: VecDeque::new(),
            calls: 0,
        }
    }
}

impl<B: Batch> Lanes<B> {
    /// Queues `batch` on `lane`. When the lane has room for another call, returns the
    /// batches the caller must send now (`batch` among them) and counts the call;
    /// otherwise `batch` waits for a call in flight to end ([`Lanes::next`]).
    pub(crate) fn submit(&self, lane: LaneId, batch: Waiting<B>) -> Option<Vec<Waiting<B>>> {
        let mut lanes = self.lanes.lock();
        let l = lanes.entry(lane).or_default();
        l.waiting.push_back(batch);
        let heavy = lane.1 == Kind::Heavy;
        if l.calls == if heavy { 1 } else { CALLS_PER_LANE } {
            return None;
        }
        if l.calls > 0 && l.waiting.len() < SECOND_CALL_AT {
            return None;
        }
        let taken = l.take(heavy);
        if taken.is_empty() {
            // Only `batch`, and its caller already stopped waiting.
            return None;
        }
        l.calls += 1;
        Some(taken)
    }

    /// Whether `taken`, a call [`Lanes::submit`] handed out, opened its idle lane: it
    /// carries only the batch that found the lane idle (a second call waits for
    /// [`SECOND_CALL_AT`] batches) on a light lane (a heavy call never has company).
    pub(crate) fn opened(lane: LaneId, taken: &[Waiting<B>]) -> bool {
        lane.1 == Kind::Light && taken.len() == 1
    }

    /// A call on `lane` ended: the batches its sender must send next, or `None` (the
    /// call no longer counts).
    pub(crate) fn next(&self, lane: LaneId) -> Option<Vec<Waiting<B>>> {
        let mut lanes = self.lanes.lock();
        let l = lanes.get_mut(&lane)?;
        // Few waiting and another call in flight: they go out when that one ends.
        let taken = if l.calls > 1 && l.waiting.len() < SECOND_CALL_AT {
            Vec::new()
        } else {
            l.take(lane.1 == Kind::Heavy)
        };
        if !taken.is_empty() {
            return Some(taken);
        }
        l.calls -= 1;
        if l.calls == 0 {
            lanes.remove(&lane);
        }
        None
    }

    /// Adds to `taken`, a call about to go on `lane`, the batches that arrived since
    /// it was taken, up to a call's caps.
    pub(crate) fn top_up(&self, lane: LaneId, taken: &mut Vec<Waiting<B>>) {
        let mut lanes = self.lanes.lock();
        if let Some(l) = lanes.get_mut(&lane) {
            let keys = taken.iter().map(|w| w.batch.keys()).sum();
            l.take_into(lane.1 == Kind::Heavy, taken, keys);
        }
    }
}

impl<B: Batch> Lane<B> {
    /// The batches for one call, oldest first, skipping those nobody waits for; one
    /// alone when `heavy`.
    fn take(&mut self, heavy: bool) -> Vec<Waiting<B>> {
        let mut taken = Vec::new();
        self.take_into(heavy, &mut taken, 0);
        taken
    }

    /// Moves waiting batches into `taken` (holding `keys` keys) up to a call's caps.
    fn take_into(&mut self, heavy: bool, taken: &mut Vec<Waiting<B>>, mut keys: usize) {
        while let Some(w) = self.waiting.front() {
            if w.answer.is_closed() {
                self.waiting.pop_front();
                continue;
            }
            let more = w.batch.keys();
            let most = if heavy { 1 } else { MAX_BATCHES };
            if !taken.is_empty() && (taken.len() == most || keys + more > MAX_KEYS) {
                break;
            }
            keys += more;
            taken.extend(self.waiting.pop_front());
        }
    }
}

/// Hands each batch of a call its part of `reply`, or the call's failure.
pub(crate) fn answer<B: Batch>(batches: Vec<Waiting<B>>, reply: Result<Value, Failure>) {
    let parts =
        reply.and_then(|value| B::split(value, &batches).map_err(|why| Failure::Reply(why.into())));
    match parts {
        Ok(parts) => {
            for (w, part) in batches.into_iter().zip(parts) {
                // A caller that stopped waiting has dropped its receiver.
                let _ = w.answer.send(Ok(part));
            }
        }
        Err(failure) => {
            for w in batches {
                let _ = w.answer.send(Err(failure.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
