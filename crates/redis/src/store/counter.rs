//! Batches of limits that charge every request — fixed windows with `count_rejected`,
//! the Envoy reference's rules — decided with no script, as the reference decides
//! them: `INCRBY` per request (`GET` for a peek), then the decision computed from the
//! counts it returns ([`decide_counted`]), which is the one the script and the memory
//! store give. Such a batch is charged in full whatever it decides, so charging first
//! loses nothing; what a script would add is its call's cost.
//!
//! Each `INCRBY` is followed by `PEXPIRE … NX` (plain `PEXPIRE` on a server without
//! functions, older than 7.0, which lacks `NX`): a window's key (`key.rs`: one per
//! window, its value the count) gets its TTL — a second past its window's end — when
//! it is created, in the same round trip, and keeps it. With `NX` an existing key's
//! `PEXPIRE` changes nothing, so nothing reaches the replicas but the `INCRBY`.
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

use redis::Value;
use spillway_core::store::decide_counted;
use spillway_core::{BatchDecision, Error as CoreError, Request, Timestamp};

use crate::coalesce::Waiting;
use crate::script::Section;

/// A batch of counted requests (every one
/// [`is_counted`](spillway_core::store::is_counted)) on their window `keys` at the
/// caller's `now`.
pub(crate) fn section(keys: Vec<String>, requests: &[Request<'_>], now: Timestamp) -> Section {
    let at = now.as_micros();
    let ttls = requests
        .iter()
        .map(|r| {
            let window = r.limit.window_micros();
            (window - at % window).div_ceil(1000) + 1000
        })
        .collect();
    Section {
        keys,
        now: Some(at),
        requests: requests
            .iter()
            .map(|r| (String::new(), r.cost, Vec::new()))
            .collect(),
        counted: Some(ttls),
    }
}

/// The commands of one request: `INCRBY` and `PEXPIRE`, or a peek's `GET`.
fn replies_of(cost: u64) -> usize {
    if cost == 0 { 1 } else { 2 }
}

/// One pipeline for the counted batches of a call, in order. `nx`: the server takes
/// `PEXPIRE … NX` (Redis ≥ 7.0, Valkey).
pub(crate) fn pipeline<'a>(
    sections: impl Iterator<Item = &'a Section>,
    nx: bool,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for s in sections {
        let ttls = s.counted.as_deref().unwrap_or_default();
        for ((key, (_, cost, _)), ttl) in s.keys.iter().zip(&s.requests).zip(ttls) {
            if *cost == 0 {
                pipe.cmd("GET").arg(key);
                continue;
            }
            pipe.cmd("INCRBY").arg(key).arg(*cost);
            let expire = pipe.cmd("PEXPIRE").arg(key).arg(*ttl);
            if nx {
                expire.arg("NX");
            }
        }
    }
    pipe
}

/// Splits a pipeline's replies (an array) into one part per batch, in order.
pub(crate) fn split_reply(value: Value, batches: &[Waiting]) -> Result<Vec<Value>, String> {
    let Value::Array(items) = value else {
        return Err(format!("expected an array, got {value:?}"));
    };
    let sizes: Vec<usize> = batches
        .iter()
        .map(|w| {
            w.section
                .requests
                .iter()
                .map(|(_, c, _)| replies_of(*c))
                .sum()
        })
        .collect();
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

/// The decision of `requests` from their batch's part of the replies.
pub(crate) fn decide(
    requests: &[Request<'_>],
    part: Value,
    now: Timestamp,
) -> Result<BatchDecision, CoreError> {
    let Value::Array(items) = part else {
        return Err(crate::script::unexpected(format!(
            "expected an array, got {part:?}"
        )));
    };
    let mut items = items.into_iter();
    let mut before = vec![0; requests.len()];
    for (i, r) in requests.iter().enumerate() {
        let count = items.next().map(|reply| count_of(r, reply)).transpose()?;
        if r.cost > 0 {
            items.next(); // PEXPIRE's: whether it set a TTL
        }
        let after = count.ok_or_else(|| crate::script::unexpected("too few replies"))?;
        // For a later request of a shared window key this includes the earlier ones'
        // charges; `decide_counted` reads only the first's.
        before[i] = after - r.cost.min(after);
    }
    Ok(decide_counted(requests, &before, now))
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
    parsed.ok_or_else(|| crate::script::unexpected(format!("a count of {reply:?}")))
}
