//! The decision code's reply: one flat array per call, split into each batch's part,
//! and each part read into the batch's decisions (or the reason it failed).

use std::time::Duration;

use redis::Value;
use spillway_core::{BatchDecision, Crossing, Decision, Error as CoreError, Outcome, Request};

use crate::error::unexpected;

/// The integers of a batch's reply: `denied_by`, four per request (outcome: 0 admitted,
/// 1 denied, 2 a cost past the capacity, 3 admitted by borrowing, 4 denied and queued;
/// remaining,
/// reset_after, retry_after or, admitted, the wait), then the `tail` ([`tail`]): one
/// per `concurrency` request (the lapsed holds it cleared), then three per request
/// with budget alerts (the alerts its state had reached before the round and after
/// it, and its use after it; zeros on a request whose state an earlier one reports).
pub(crate) fn reply_len(requests: usize, tail: usize) -> usize {
    1 + 4 * requests + tail
}

/// The numbers of a batch's reply after its decisions ([`reply_len`]).
pub(crate) fn tail(requests: &[Request<'_>]) -> usize {
    requests.iter().filter(|r| holds(r)).count() + 3 * alerting(requests).count()
}

/// The indexes of the requests with budget alerts.
fn alerting<'r>(requests: &'r [Request<'_>]) -> impl Iterator<Item = usize> + 'r {
    (0..requests.len()).filter(|&i| !requests[i].limit.alert_at().is_empty())
}

/// Splits a call's flat reply into one part per batch, in order: an array of
/// [`reply_len`] integers (`sizes`), or the string saying why the batch failed.
pub(crate) fn split_reply(
    value: Value,
    sizes: impl ExactSizeIterator<Item = usize>,
) -> Result<Vec<Value>, String> {
    let Value::Array(items) = value else {
        return Err(format!("expected an array, got {value:?}"));
    };
    let batches = sizes.len();
    let mut items = items.into_iter();
    let mut parts = Vec::with_capacity(batches);
    for n in sizes {
        match items.next() {
            Some(why @ Value::BulkString(_)) => parts.push(why),
            Some(denied_by) => {
                let mut part = Vec::with_capacity(n);
                part.push(denied_by);
                part.extend(items.by_ref().take(n - 1));
                parts.push(Value::Array(part));
            }
            None => return Err(format!("expected {batches} batch replies, got fewer")),
        }
    }
    match items.len() {
        0 => Ok(parts),
        more => Err(format!(
            "expected {batches} batch replies, got {more} values more"
        )),
    }
}

/// Reads one batch's part of the script's reply into decisions for `requests`: a
/// failed batch (a key holding another program's value) is a permanent store error.
pub(crate) fn parse_reply(
    value: Value,
    requests: &[Request<'_>],
) -> Result<BatchDecision, CoreError> {
    match value {
        Value::Array(items) => parse_decisions(items, requests).map_err(unexpected),
        Value::BulkString(why) => Err(CoreError::Store {
            source: String::from_utf8_lossy(&why).into_owned().into(),
            transient: false,
        }),
        other => Err(unexpected(format!("expected an array, got {other:?}"))),
    }
}

fn parse_decisions(items: Vec<Value>, requests: &[Request<'_>]) -> Result<BatchDecision, String> {
    let expected = reply_len(requests.len(), tail(requests));
    if items.len() != expected {
        return Err(format!("expected {expected} integers, got {}", items.len()));
    }
    let ints = items
        .iter()
        .map(|v| match v {
            Value::Int(i) if *i >= 0 => Ok(*i as u64),
            other => Err(format!("expected a non-negative integer, got {other:?}")),
        })
        .collect::<Result<Vec<u64>, String>>()?;
    // A reply is believed only as far as it is possible: a `denied_by` past the batch
    // or a `remaining` above the limit (a server that is not ours, a bug) is an error
    // here, not an index or a subtraction that panics further on.
    let denied_by = match ints[0] {
        0 => None,
        i if i <= requests.len() as u64 => Some(i as usize - 1),
        i => {
            return Err(format!(
                "denied_by {i} names no request of a batch of {}",
                requests.len()
            ));
        }
    };
    let (each, rest) = ints[1..].split_at(4 * requests.len());
    let holding = requests.iter().filter(|r| holds(r)).count();
    let (cleared, reached) = rest.split_at(holding);
    let decisions = requests
        .iter()
        .zip(each.chunks_exact(4))
        .map(|(r, d)| {
            // 3: admitted by borrowing (a `shares` rule past its child's guarantee).
            let borrowed = d[0] == 3;
            // 4: denied, its place kept in a `concurrency` queue.
            let queued = d[0] == 4;
            let outcome = match d[0] {
                0 | 3 => Outcome::Allowed,
                1 | 4 => Outcome::Denied {
                    retry_after: Duration::from_micros(d[3]),
                },
                2 => Outcome::CostExceedsCapacity,
                other => return Err(format!("unknown outcome {other}")),
            };
            let limit = r.limit.capacity_for(r.member_bytes());
            if d[1] > limit {
                return Err(format!("remaining {} is above the limit, {limit}", d[1]));
            }
            // An admission's fourth number is its wait, never past the limit's own.
            let wait = match outcome {
                Outcome::Allowed => Duration::from_micros(d[3]),
                _ => Duration::ZERO,
            };
            if wait > r.limit.max_wait() {
                return Err(format!(
                    "a wait of {wait:?} is past the limit's max_wait, {:?}",
                    r.limit.max_wait()
                ));
            }
            Ok(Decision {
                outcome,
                limit,
                remaining: d[1],
                reset_after: Duration::from_micros(d[2]),
                wait,
                borrowed,
                queued,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let lapsed = (0..requests.len())
        .filter(|&i| holds(&requests[i]))
        .zip(cleared)
        .filter(|&(_, &n)| n > 0)
        .map(|(i, &n)| (i, n))
        .collect();
    let mut alerts = Vec::new();
    for (i, r) in alerting(requests).zip(reached.chunks_exact(3)) {
        let (from, to, used) = (r[0], r[1], r[2]);
        let most = requests[i].limit.alert_at().len() as u64;
        if from > to || to > most {
            return Err(format!(
                "alerts reached from {from} to {to} of a limit with {most}"
            ));
        }
        if to > from {
            alerts.push(Crossing {
                request: i,
                from: from as u8,
                to: to as u8,
                used,
            });
        }
    }
    Ok(BatchDecision {
        decisions,
        denied_by,
        lapsed,
        alerts,
    })
}

/// Whether `r`'s reply ends with the lapsed holds it cleared.
pub(crate) fn holds(r: &Request<'_>) -> bool {
    r.limit.algorithm().holds()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;
    use spillway_core::{Algorithm, Key, Limit, Request};

    use super::parse_reply;

    /// An admission's fourth number is its wait: read as one, and refused past the
    /// limit's `max_wait` (no true script sends it).
    #[test]
    fn an_admissions_wait_is_read_and_bounded_by_max_wait() {
        let key = Key::new("k").unwrap();
        let limit = Limit::builder(Algorithm::Gcra, 10, Duration::from_secs(1))
            .max_wait(Duration::from_millis(300))
            .build()
            .unwrap();
        let reply =
            |wait: i64| Value::Array([0, 0, 0, 1_000, wait].into_iter().map(Value::Int).collect());
        let requests = [Request::new(&key, &limit, 1)];
        let batch = parse_reply(reply(300_000), &requests).unwrap();
        assert_eq!(batch.decisions[0].wait, Duration::from_millis(300));
        let past = parse_reply(reply(300_001), &requests).unwrap_err();
        assert!(
            past.to_string().contains("past the limit's max_wait"),
            "{past}"
        );
    }

    /// Outcome 3 is an admission by borrowing (a `shares` child past its guarantee);
    /// 0 one within it; an outcome past 3 is an error, not a guess.
    #[test]
    fn outcome_three_is_an_admission_by_borrowing() {
        let key = Key::new("k").unwrap();
        let limit = Limit::builder(Algorithm::Gcra, 10, Duration::from_secs(1))
            .build()
            .unwrap();
        let reply =
            |o: i64| Value::Array([0, o, 5, 1_000, 0].into_iter().map(Value::Int).collect());
        let requests = [Request::new(&key, &limit, 1)];
        let borrowed = &parse_reply(reply(3), &requests).unwrap().decisions[0];
        assert!(borrowed.allowed() && borrowed.borrowed, "{borrowed:?}");
        let own = &parse_reply(reply(0), &requests).unwrap().decisions[0];
        assert!(own.allowed() && !own.borrowed, "{own:?}");
        let unknown = parse_reply(reply(5), &requests).unwrap_err();
        assert!(
            unknown.to_string().contains("unknown outcome 5"),
            "{unknown}"
        );
    }

    #[test]
    fn outcome_four_is_a_denial_queued() {
        let key = Key::new("k").unwrap();
        let limit = Limit::builder(Algorithm::Concurrency, 10, Duration::from_secs(60))
            .max_wait(Duration::from_secs(1))
            .build()
            .unwrap();
        let reply =
            |o: i64| Value::Array([1, o, 0, 1_000, 7, 0].into_iter().map(Value::Int).collect());
        let requests = [Request::new(&key, &limit, 1).with_member(b"\0p0000000000000000r")];
        let queued = &parse_reply(reply(4), &requests).unwrap().decisions[0];
        assert!(!queued.allowed() && queued.queued, "{queued:?}");
        assert_eq!(queued.retry_after(), Some(Duration::from_micros(7)));
        let denied = &parse_reply(reply(1), &requests).unwrap().decisions[0];
        assert!(!denied.allowed() && !denied.queued, "{denied:?}");
    }
}
