//! Batches of limits that charge every request — fixed windows with `count_rejected`,
//! the Envoy reference's rules — decided with no script, as the reference decides
//! them: one pipeline of `INCRBY` per request (`GET` for a peek), then the decision
//! computed from the counts it returns ([`decide_counted`]), which is the one the
//! script and the memory store give. Such a batch is charged in full whatever it
//! decides, so charging first loses nothing; what a script would add is its call's
//! cost (tens of µs of Redis CPU, against about one for an `INCRBY`).
//!
//! A window's key (`key.rs`: one per window, its value the count) that the pipeline
//! created — its count is the request's cost — gets its TTL next: `PEXPIRE` to a
//! second after the window ends, once per key and window, before the decision
//! returns. Were that lost (the process killed between the two), the key would stay
//! without a TTL, but no decision reads a window's key after its window.
//!
//! The window is the caller's: its `now` names the key (the reference, too, decides
//! on its own clock). Replicas whose clocks differ by δ move the window's edge by δ
//! between them; within a window's key the count is exact.

use redis::Value;
use spillway_core::store::decide_counted;
use spillway_core::{BatchDecision, Error as CoreError, Request, Timestamp};

use super::Inner;
use crate::coalesce::Failure;

impl Inner {
    /// Decides `requests` (every one [`is_counted`](spillway_core::store::is_counted)),
    /// whose window keys are `keys`, at the caller's `now`.
    pub(super) async fn count(
        &self,
        keys: &[String],
        requests: &[Request<'_>],
        now: Timestamp,
    ) -> Result<BatchDecision, CoreError> {
        let mut pipe = redis::pipe();
        for (key, r) in keys.iter().zip(requests) {
            match r.cost {
                0 => pipe.cmd("GET").arg(key),
                cost => pipe.cmd("INCRBY").arg(key).arg(cost),
            };
        }
        let replies = self
            .bounded(self.connection.query_pipeline(&pipe))
            .await
            .map_err(Failure::error)?;
        if replies.len() != requests.len() {
            return Err(crate::script::unexpected(format!(
                "{} replies to a pipeline of {} counts",
                replies.len(),
                requests.len()
            )));
        }
        let mut after = Vec::with_capacity(requests.len());
        for (key, reply) in keys.iter().zip(replies) {
            after.push(count_of(key, reply)?);
        }

        // Each key's count before the batch, from its first request's reply; the
        // keys this batch created.
        let mut before = vec![0; requests.len()];
        let mut created = Vec::new();
        for i in 0..requests.len() {
            match keys[..i].iter().position(|k| *k == keys[i]) {
                Some(first) => before[i] = before[first],
                None => {
                    let cost = requests[i].cost;
                    before[i] = after[i] - cost.min(after[i]);
                    if cost > 0 && after[i] == cost {
                        created.push(i);
                    }
                }
            }
        }
        if !created.is_empty() {
            self.expire(keys, requests, &created, now).await;
        }
        Ok(decide_counted(requests, &before, now))
    }

    /// Gives the window keys a batch created their TTL: a second past their window's
    /// end. A failure is logged, not returned: the decision stands (it was charged).
    async fn expire(
        &self,
        keys: &[String],
        requests: &[Request<'_>],
        created: &[usize],
        now: Timestamp,
    ) {
        let mut pipe = redis::pipe();
        for &i in created {
            let window = requests[i].limit.window_micros();
            let left = window - now.as_micros() % window;
            pipe.cmd("PEXPIRE")
                .arg(&keys[i])
                .arg(left.div_ceil(1000) + 1000);
        }
        if let Err(e) = self.bounded(self.connection.query_pipeline(&pipe)).await {
            tracing::warn!(
                keys = created.len(),
                error = %e.error(),
                "could not set the TTL of new fixed-window keys; they will outlive their \
                 window until Redis evicts them"
            );
        }
    }
}

/// The count a reply says: `INCRBY`'s integer, or `GET`'s (none: 0). An error reply
/// (`WRONGTYPE`, "not an integer") means another program's value at the key.
fn count_of(key: &str, reply: Value) -> Result<u64, CoreError> {
    let parsed = match &reply {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::Nil => Some(0),
        Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        Value::ServerError(_) => {
            return Err(CoreError::Store {
                source: format!(
                    "key {key} holds a value that is not state of its algorithm (a fixed \
                     window's count)"
                )
                .into(),
                transient: false,
            });
        }
        _ => None,
    };
    parsed.ok_or_else(|| crate::script::unexpected(format!("a count of {reply:?} at {key}")))
}
