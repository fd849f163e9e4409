//! Limits from command-line flags, one way for every subcommand (`check`, `bench`,
//! `simulate`): the same flags, the same rules, the same errors.

use std::time::Duration;

use anyhow::bail;
use spillway_core::{Algorithm, Calendar, Edge, Limit};

/// The flags that shape a limit beyond its algorithm, count and window.
#[derive(Clone, Debug, Default)]
pub struct Shape<'a> {
    /// `--precision`: sliding_window's sub-windows, distinct's (unless given, the
    /// algorithm's own: 1 as a name parses).
    pub precision: Option<u32>,
    /// `--edge`: sliding_window only.
    pub edge: Option<&'a str>,
    /// `--burst`: token_bucket and gcra only (their default: the limit).
    pub burst: Option<u64>,
    /// `--count-rejected`.
    pub count_rejected: bool,
    /// `--period` in `--time-zone`: fixed_window by calendar.
    pub calendar: Option<Calendar>,
    /// `--max-wait`: token_bucket and gcra admit a request whose turn comes within it
    /// after that wait.
    pub max_wait: Option<Duration>,
}

/// Whether `algorithm` takes `--burst`.
pub fn has_burst(algorithm: &Algorithm) -> bool {
    matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra)
}

/// A limit of `n` per `window` of `algorithm`, shaped by `shape`; a flag the algorithm
/// has no use for is an error that says which algorithms take it.
pub fn build(
    mut algorithm: Algorithm,
    n: u64,
    window: Duration,
    shape: Shape<'_>,
) -> anyhow::Result<Limit> {
    match &mut algorithm {
        Algorithm::SlidingWindow { precision, edge } => {
            *precision = shape.precision.unwrap_or(*precision);
            if let Some(e) = shape.edge {
                *edge = e.parse::<Edge>()?;
            }
        }
        Algorithm::Distinct { precision } if shape.edge.is_none() => {
            *precision = shape.precision.unwrap_or(*precision);
        }
        _ if shape.precision.is_some() || shape.edge.is_some() => {
            bail!("--precision applies to sliding_window and distinct, --edge to sliding_window")
        }
        _ => {}
    }
    if shape.burst.is_some() && !has_burst(&algorithm) {
        bail!("--burst applies to token_bucket and gcra only");
    }
    let mut b = Limit::builder(algorithm, n, window).count_rejected(shape.count_rejected);
    if let Some(burst) = shape.burst {
        b = b.burst(burst);
    }
    if let Some(calendar) = shape.calendar {
        b = b.calendar(calendar);
    }
    if let Some(wait) = shape.max_wait {
        if !has_burst(&algorithm) {
            bail!("--max-wait applies to token_bucket and gcra only");
        }
        b = b.max_wait(wait);
    }
    Ok(b.build()?)
}
