//! The decision script (`scripts/decide.lua`): its arguments and its reply.
//!
//! Each request becomes nine integers (see the script's header); Rust computes every
//! derived parameter (scaled rates, GCRA times) so the script does no validation of
//! limits beyond range checks. The reply is `denied_by` then four integers per request.

use std::time::Duration;

use redis::Value;
use spillway_core::{Algorithm, BatchDecision, Decision, Edge, Outcome, Request, Timestamp};

/// The script source, embedded at build time.
pub(crate) const SOURCE: &str = include_str!("../scripts/decide.lua");

/// Arguments per request.
pub(crate) const FIELDS: usize = 9;

/// Where the script takes `now` from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeSource {
    /// Redis `TIME`, read inside the script: one clock for every app server. The
    /// `now` callers pass is ignored.
    #[default]
    Server,
    /// The caller's `now` (its `Clock`). For tests with a manual clock, and for setups
    /// whose app servers' clocks are known to agree.
    Caller,
}

/// Appends ARGV for `requests` (after ARGV[1], the time) to `args`.
pub(crate) fn push_args(args: &mut Vec<u64>, requests: &[Request<'_>]) {
    for r in requests {
        let limit = r.limit;
        let (code, params) = match limit.algorithm() {
            Algorithm::FixedWindow => (1, [0; 4]),
            Algorithm::SlidingLog => (2, [0; 4]),
            Algorithm::SlidingWindow { precision, edge } => {
                let edge = match edge {
                    Edge::Interpolate => 0,
                    Edge::Strict => 1,
                    Edge::Lenient => 2,
                };
                (3, [u64::from(precision), edge, 0, 0])
            }
            Algorithm::TokenBucket => {
                let (rate, unit) = limit.scaled_rate();
                (4, [rate, unit, 0, 0])
            }
            Algorithm::Gcra => {
                let (rate, unit) = limit.scaled_rate();
                let (e1, tau) = limit.gcra_times();
                (5, [rate, unit, e1, tau])
            }
        };
        args.extend_from_slice(&[
            code,
            r.cost,
            u64::from(limit.count_rejected()),
            limit.capacity(),
            limit.window_micros(),
        ]);
        args.extend_from_slice(&params);
    }
}

/// ARGV[1]: `now` in µs, or `server`.
pub(crate) fn time_arg(source: TimeSource, now: Timestamp) -> String {
    match source {
        TimeSource::Server => "server".to_owned(),
        TimeSource::Caller => now.as_micros().to_string(),
    }
}

/// Reads the script's reply into decisions for `requests`.
pub(crate) fn parse_reply(value: Value, requests: &[Request<'_>]) -> Result<BatchDecision, String> {
    let Value::Array(items) = value else {
        return Err(format!("expected an array, got {value:?}"));
    };
    if items.len() != 1 + 4 * requests.len() {
        return Err(format!(
            "expected {} integers, got {}",
            1 + 4 * requests.len(),
            items.len()
        ));
    }
    let ints = items
        .iter()
        .map(|v| match v {
            Value::Int(i) if *i >= 0 => Ok(*i as u64),
            other => Err(format!("expected a non-negative integer, got {other:?}")),
        })
        .collect::<Result<Vec<u64>, String>>()?;
    let denied_by = match ints[0] {
        0 => None,
        i => Some(i as usize - 1),
    };
    let decisions = requests
        .iter()
        .zip(ints[1..].chunks_exact(4))
        .map(|(r, d)| {
            let outcome = match d[0] {
                0 => Outcome::Allowed,
                1 => Outcome::Denied {
                    retry_after: Duration::from_micros(d[3]),
                },
                2 => Outcome::CostExceedsCapacity,
                other => return Err(format!("unknown outcome {other}")),
            };
            Ok(Decision {
                outcome,
                limit: r.limit.capacity(),
                remaining: d[1],
                reset_after: Duration::from_micros(d[2]),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(BatchDecision {
        decisions,
        denied_by,
    })
}
