//! The algorithms by name: [`Algorithm`] and the sliding window's [`Edge`], as limits,
//! policy files and the command line name them.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// How a rate limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// A counter per window aligned to the epoch. Exact per window; up to 2× the limit
    /// across a window edge.
    FixedWindow,
    /// A log of admitted requests: exact in any window of length `window`.
    SlidingLog,
    /// Counters in `precision` sub-buckets of the window; approximate, see [`Edge`].
    SlidingWindow {
        /// Sub-buckets per window (1 = the classic current + previous two-bucket counter).
        precision: u32,
        /// How the oldest, partly expired sub-bucket counts.
        edge: Edge,
    },
    /// A bucket of `burst` tokens refilled at `limit` per `window`.
    TokenBucket,
    /// The generic cell rate algorithm: one timestamp per key, rate `limit` per `window`,
    /// up to `burst` at once.
    Gcra,
}

/// How `sliding_window` counts the oldest sub-bucket, the one only partly inside the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Edge {
    /// Weight it by the fraction still inside the window (Cloudflare's estimate).
    #[default]
    Interpolate,
    /// Count it whole: never admits more than an exact sliding log would (Figma's choice).
    Strict,
    /// Drop it: never denies a request an exact sliding log would admit.
    Lenient,
}

impl Algorithm {
    /// Every algorithm with its default parameters, in a stable order.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow {
            precision: 1,
            edge: Edge::Interpolate,
        },
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];

    /// The algorithm's name as written in configuration: `fixed_window`, `sliding_log`,
    /// `sliding_window`, `token_bucket`, `gcra`.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow { .. } => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Whether the algorithm never admits more than its bound (see the crate docs).
    pub fn is_exact(&self) -> bool {
        !matches!(self, Algorithm::SlidingWindow { .. })
    }

    pub(crate) fn has_burst(&self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::SlidingWindow { precision, edge } => {
                write!(f, "sliding_window(precision={precision}, edge={edge})")
            }
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    /// Parses an algorithm name; `sliding_window` gets precision 1 and `interpolate`.
    fn from_str(s: &str) -> Result<Self, Error> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                Error::InvalidLimit(format!(
                    "unknown algorithm `{s}` (expected one of fixed_window, sliding_log, \
                     sliding_window, token_bucket, gcra)"
                ))
            })
    }
}

impl Edge {
    /// The mode's name as written in configuration.
    pub fn name(&self) -> &'static str {
        match self {
            Edge::Interpolate => "interpolate",
            Edge::Strict => "strict",
            Edge::Lenient => "lenient",
        }
    }
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Edge {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        [Edge::Interpolate, Edge::Strict, Edge::Lenient]
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                Error::InvalidLimit(format!(
                    "unknown edge `{s}` (expected interpolate, strict or lenient)"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
        }
        assert!(
            "leaky"
                .parse::<Algorithm>()
                .unwrap_err()
                .to_string()
                .contains("unknown algorithm `leaky`")
        );
        assert_eq!("strict".parse::<Edge>().unwrap(), Edge::Strict);
    }
}
