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
    /// At most `limit` distinct *members* per key per window (distinct IPs per API key),
    /// counted over `precision` sub-windows: exactly up to a limit of
    /// [`EXACT_MAX`](crate::algorithm::distinct::EXACT_MAX), with sketches (HyperLogLogs and
    /// Bloom filters) above.
    /// See [`distinct`](crate::algorithm::distinct).
    Distinct {
        /// Sub-windows per window (1 = fixed windows aligned to the epoch).
        precision: u32,
    },
    /// At most `limit` holds live at once per key (requests in flight), each given back
    /// by its id or lapsing `window` (its lease) after it was taken. See
    /// [`concurrency`](crate::algorithm::concurrency).
    Concurrency,
    /// A parent rate shared by children: each has a guaranteed rate and a ceiling it
    /// reaches by borrowing what the others leave, by weight, and priorities shed the
    /// least important borrowers first. The member names the child and the priority.
    /// See [`shares`](crate::algorithm::shares).
    Shares,
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
    /// Every algorithm that counts requests, with its default parameters, in a stable
    /// order. [`Algorithm::DISTINCT`], which counts members, and
    /// [`Algorithm::Concurrency`], which counts holds, are apart: their requests carry a
    /// member (what is counted, the hold's id).
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

    /// `distinct` with precision 1.
    pub const DISTINCT: Algorithm = Algorithm::Distinct { precision: 1 };

    /// The algorithm's name as written in configuration: `fixed_window`, `sliding_log`,
    /// `sliding_window`, `token_bucket`, `gcra`, `distinct`, `concurrency`.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow { .. } => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::Distinct { .. } => "distinct",
            Algorithm::Concurrency => "concurrency",
            Algorithm::Shares => "shares",
        }
    }

    /// Whether the algorithm never admits more requests than its bound (see the crate
    /// docs). `distinct` counts members, not requests: false.
    pub fn is_exact(&self) -> bool {
        !matches!(
            self,
            Algorithm::SlidingWindow { .. } | Algorithm::Distinct { .. }
        )
    }

    /// Whether it counts the distinct members requests bring (`distinct`).
    pub fn counts_members(&self) -> bool {
        matches!(self, Algorithm::Distinct { .. })
    }

    /// Whether it counts holds live at once (`concurrency`), not requests per window.
    pub fn holds(&self) -> bool {
        matches!(self, Algorithm::Concurrency)
    }

    /// Whether it shares a parent rate among children (`shares`).
    pub fn shares(&self) -> bool {
        matches!(self, Algorithm::Shares)
    }

    /// Whether requests must bring a member: what `distinct` counts, the id of a
    /// `concurrency` hold, the child and priority of a `shares` request.
    pub fn takes_member(&self) -> bool {
        self.counts_members() || self.holds() || self.shares()
    }

    /// Whether units charged can be given back ([`Request::refund`](crate::Request::refund),
    /// what a reservation took and did not use): a fixed window, a token bucket, GCRA.
    /// A sliding log or window keeps no charge apart from the others of its sub-window,
    /// `distinct` counts members, not units, and `concurrency` gives back holds by
    /// their ids, not units ([`Request::release`](crate::Request::release)).
    pub fn refunds(&self) -> bool {
        matches!(
            self,
            Algorithm::FixedWindow | Algorithm::TokenBucket | Algorithm::Gcra
        )
    }

    pub(crate) fn has_burst(&self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::Shares
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::SlidingWindow { precision, edge } => {
                write!(f, "sliding_window(precision={precision}, edge={edge})")
            }
            Algorithm::Distinct { precision } if *precision != 1 => {
                write!(f, "distinct(precision={precision})")
            }
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    /// Parses an algorithm name; `sliding_window` gets precision 1 and `interpolate`,
    /// `distinct` precision 1.
    fn from_str(s: &str) -> Result<Self, Error> {
        Algorithm::ALL
            .into_iter()
            .chain([
                Algorithm::DISTINCT,
                Algorithm::Concurrency,
                Algorithm::Shares,
            ])
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                Error::InvalidLimit(format!(
                    "unknown algorithm `{s}` (expected one of fixed_window, sliding_log, \
                     sliding_window, token_bucket, gcra, distinct, concurrency, shares)"
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
        for a in Algorithm::ALL.into_iter().chain([
            Algorithm::DISTINCT,
            Algorithm::Concurrency,
            Algorithm::Shares,
        ]) {
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
