//! Batches of limits that charge every request — fixed windows with `count_rejected`,
//! the Envoy reference's rules — decided with no script, as the reference decides
//! them: `INCRBY` per request (`GET` for a peek), then the decision computed from the
//! counts it returns ([`decide_counted`]), which is the one the script and the memory
//! store give. Such a batch is charged in full whatever it decides, so charging first
//! loses nothing; what a script would add is its call's cost.
//!
//! A window's key (`key.rs`: one per window, its value the count) gets its TTL — a
//! second past its window's end — in the round trip that creates it: its `INCRBY` is
//! followed by `PEXPIRE … NX` (plain `PEXPIRE` on a server without functions, older
//! than 7.0, which lacks `NX`; with `NX` an existing key's TTL stays, and nothing
//! reaches the replicas but the `INCRBY`). Once this process has seen a key's TTL set,
//! its next `INCRBY`s go alone ([`Expiring`]): half the commands for a key decided
//! more than once a window. Should such a key have been lost meanwhile (a failover to
//! a replica that lacked it, a flush), its `INCRBY` creates it again without a TTL;
//! that `INCRBY` answers its own cost, so the decision sends the `PEXPIRE` at once,
//! before it answers ([`decide`] says which). A key never lives without a TTL but
//! for that one round trip.
//!
//! Batches coalesce as the script's do (`coalesce.rs`, a lane of their own): the
//! batches waiting while the lane's calls are in flight go out in one pipeline, which
//! is what keeps Redis's per-read costs off each decision.
//!
//! Unlike a script's batch, a batch here is not all or nothing when a key holds another
//! program's value: that request's `INCRBY` fails (the batch answers the error) and the
//! others of its batch are charged, as the reference's pipeline does.
//!
//! The window is the caller's: its `now` names the key (the reference, too, decides
//! on its own clock). Replicas whose clocks differ by δ move the window's edge by δ
//! between them; within a window's key the count is exact.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use redis::Value;
use spillway_core::store::decide_counted;
use spillway_core::{BatchDecision, Error as CoreError, Request, Timestamp};

use crate::coalesce::{Batch, Waiting};
use crate::error::unexpected;

/// Window keys whose TTL this process has seen set, by a keyed hash of their text: a
/// direct-mapped table of [`Expiring::SLOTS`] tags (512 KiB), where a key overwrites
/// whichever shares its slot. A key it does not know (never seen, overwritten, or a
/// hash collision the other way) only costs its `PEXPIRE … NX` again; one it wrongly
/// knows (two keys of one tag: a 64-bit collision) is still caught by its `INCRBY`'s
/// answer ([`decide`]).
#[derive(Debug)]
pub(crate) struct Expiring {
    slots: Box<[AtomicU64]>,
    seed: RandomState,
}

impl Expiring {
    /// Keys remembered: enough for the window keys of 65,536 busy clients at once.
    pub(crate) const SLOTS: usize = 1 << 16;

    /// A key's tag: never 0, which marks an empty slot.
    fn tag(&self, key: &str) -> u64 {
        self.seed.hash_one(key) | 1
    }

    fn slot(&self, tag: u64) -> &AtomicU64 {
        &self.slots[(tag >> 1) as usize & (Self::SLOTS - 1)]
    }

    fn has_ttl(&self, tag: u64) -> bool {
        self.slot(tag).load(Ordering::Relaxed) == tag
    }

    fn set(&self, tag: u64) {
        self.slot(tag).store(tag, Ordering::Relaxed);
    }

    fn forget(&self, tag: u64) {
        let _ = self
            .slot(tag)
            .compare_exchange(tag, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

impl Default for Expiring {
    fn default() -> Self {
        Expiring {
            slots: (0..Self::SLOTS).map(|_| AtomicU64::new(0)).collect(),
            seed: RandomState::new(),
        }
    }
}

/// What a counted request's commands are: its window key's TTL, should the call create
/// the key, and whether its `PEXPIRE` goes with its `INCRBY` (the key is not known to
/// have a TTL).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    ttl_ms: u64,
    tag: u64,
    expire: bool,
}

/// The windows of counted `requests` on their window `keys` at the caller's `now`.
pub(crate) fn windows(
    keys: &[String],
    requests: &[Request<'_>],
    now: Timestamp,
    expiring: &Expiring,
) -> Vec<Window> {
    keys.iter()
        .zip(requests)
        .map(|(key, r)| {
            let tag = expiring.tag(key);
            Window {
                ttl_ms: ttl_ms(r, now),
                tag,
                expire: !expiring.has_ttl(tag),
            }
        })
        .collect()
}

/// A window key's TTL in ms: a second past its window's end.
fn ttl_ms(r: &Request<'_>, now: Timestamp) -> u64 {
    let (at, window) = (now.as_micros(), r.limit.window_micros());
    (window - at % window).div_ceil(1000) + 1000
}

/// A batch of counted requests (every one
/// [`is_counted`](spillway_core::store::is_counted)): each one's window key, cost
/// (usage is charged in full here, as every counted request is) and [`Window`].
#[derive(Debug)]
pub(crate) struct Counted {
    keys: Vec<String>,
    costs: Vec<u64>,
    windows: Vec<Window>,
}

impl Counted {
    /// `requests` on their window `keys`, with their [`windows`].
    pub(crate) fn new(keys: Vec<String>, requests: &[Request<'_>], windows: Vec<Window>) -> Self {
        let costs = requests.iter().map(|r| r.cost).collect();
        Counted {
            keys,
            costs,
            windows,
        }
    }

    /// The commands of each request, in order: `INCRBY`, and `PEXPIRE` unless its key
    /// is known to have a TTL; or a peek's `GET`.
    fn commands(&self) -> impl Iterator<Item = (&str, u64, &Window)> {
        self.keys
            .iter()
            .zip(&self.costs)
            .zip(&self.windows)
            .map(|((key, &cost), w)| (key.as_str(), cost, w))
    }

    /// Replies the batch's commands get.
    fn replies(&self) -> usize {
        self.commands()
            .map(|(_, cost, w)| if cost > 0 && w.expire { 2 } else { 1 })
            .sum()
    }
}

impl Batch for Counted {
    fn keys(&self) -> usize {
        self.keys.len()
    }

    /// Splits a pipeline's replies (an array) into one part per batch, in order.
    fn split(reply: Value, batches: &[Waiting<Self>]) -> Result<Vec<Value>, String> {
        let Value::Array(items) = reply else {
            return Err(format!("expected an array, got {reply:?}"));
        };
        let sizes: Vec<usize> = batches.iter().map(|w| w.batch.replies()).collect();
        let expected: usize = sizes.iter().sum();
        if items.len() != expected {
            return Err(format!(
                "expected {expected} replies to a pipeline of counts, got {}",
                items.len()
            ));
        }
        let mut items = items.into_iter();
        Ok(sizes
            .into_iter()
            .map(|n| Value::Array(items.by_ref().take(n).collect()))
            .collect())
    }
}

/// One pipeline for the counted batches of a call, in order. `nx`: the server takes
/// `PEXPIRE … NX` (Redis ≥ 7.0, Valkey).
pub(crate) fn pipeline<'a>(
    batches: impl Iterator<Item = &'a Counted>,
    nx: bool,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for (key, cost, w) in batches.flat_map(Counted::commands) {
        if cost == 0 {
            pipe.cmd("GET").arg(key);
            continue;
        }
        pipe.cmd("INCRBY").arg(key).arg(cost);
        if w.expire {
            expire(&mut pipe, key, w.ttl_ms, nx);
        }
    }
    pipe
}

/// Adds `PEXPIRE key ttl_ms [NX]` to `pipe`.
fn expire(pipe: &mut redis::Pipeline, key: &str, ttl_ms: u64, nx: bool) {
    let cmd = pipe.cmd("PEXPIRE").arg(key).arg(ttl_ms);
    if nx {
        cmd.arg("NX");
    }
}

/// The `PEXPIRE`s of the window keys whose `INCRBY` found them gone ([`decide`]'s
/// `lost`), each with its window.
pub(crate) fn expire_again<'a>(
    lost: impl Iterator<Item = (String, &'a Window)>,
    nx: bool,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for (key, w) in lost {
        expire(&mut pipe, &key, w.ttl_ms, nx);
    }
    pipe
}

/// Remembers that the window keys `lost` ([`decide`]) have their TTL again.
pub(crate) fn expired_again(windows: &[Window], lost: &[usize], expiring: &Expiring) {
    for &i in lost {
        expiring.set(windows[i].tag);
    }
}

/// The decision of `requests` from their batch's part of the replies, and the
/// requests (indices) whose window key the `INCRBY` found gone although this process
/// had seen its TTL set ([`Expiring`]): created again, without a TTL, which the caller
/// must send ([`expire_again`]) before it answers. Remembers the keys whose TTL this
/// call set.
pub(crate) fn decide(
    requests: &[Request<'_>],
    windows: &[Window],
    part: Value,
    now: Timestamp,
    expiring: &Expiring,
) -> Result<(BatchDecision, Vec<usize>), CoreError> {
    let Value::Array(items) = part else {
        return Err(unexpected(format!("expected an array, got {part:?}")));
    };
    let mut items = items.into_iter();
    let mut before = vec![0; requests.len()];
    let mut lost = Vec::new();
    for (i, (r, w)) in requests.iter().zip(windows).enumerate() {
        let count = items.next().map(|reply| count_of(r, reply)).transpose()?;
        let after = count.ok_or_else(|| unexpected("too few replies"))?;
        if r.cost > 0 && w.expire {
            // PEXPIRE's: 1 (set) or 0 (NX: the key had one); either way it has a TTL.
            if let Some(Value::Int(_)) = items.next() {
                expiring.set(w.tag);
            }
        } else if r.cost > 0 && after == r.cost {
            // Nothing before this charge: the key was gone, and is back without a TTL.
            expiring.forget(w.tag);
            lost.push(i);
        }
        // For a later request of a shared window key this includes the earlier ones'
        // charges; `decide_counted` reads only the first's.
        before[i] = after - r.cost.min(after);
    }
    Ok((decide_counted(requests, &before, now), lost))
}

/// The count a reply says: `INCRBY`'s integer, or `GET`'s (none: 0). An error reply
/// (`WRONGTYPE`, "not an integer") means another program's value at the key.
fn count_of(r: &Request<'_>, reply: Value) -> Result<u64, CoreError> {
    let parsed = match &reply {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::Nil => Some(0),
        Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        Value::ServerError(_) => {
            return Err(CoreError::Store {
                source: format!(
                    "the Redis key of `{}`'s fixed window holds a value that is not a count",
                    r.key.as_str()
                )
                .into(),
                transient: false,
            });
        }
        _ => None,
    };
    parsed.ok_or_else(|| unexpected(format!("a count of {reply:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_known_once_set_until_forgotten_or_overwritten() {
        let expiring = Expiring::default();
        let a = expiring.tag("spillway:{t1}:fw30000000:60s");
        assert!(!expiring.has_ttl(a), "unknown at first");
        expiring.set(a);
        assert!(expiring.has_ttl(a));
        expiring.forget(a);
        assert!(!expiring.has_ttl(a), "forgotten");

        // A key of another tag in the same slot takes it: the first is unknown again
        // (its next decision sends its PEXPIRE), never mistaken for the second.
        expiring.set(a);
        let b = (1..)
            .map(|n| expiring.tag(&format!("spillway:{{t{n}}}:fw30000000:60s")))
            .find(|&t| t != a && std::ptr::eq(expiring.slot(t), expiring.slot(a)))
            .expect("a key sharing the slot");
        expiring.set(b);
        assert!(expiring.has_ttl(b) && !expiring.has_ttl(a));
        // Forgetting a key no longer in its slot leaves the other.
        expiring.forget(a);
        assert!(expiring.has_ttl(b));
    }
}
