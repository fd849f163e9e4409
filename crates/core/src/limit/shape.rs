//! [`Shape`]: what a limit's stored state belongs to, computed once when the limit is
//! built (a store compares it on every check).

use crate::algorithm::{Algorithm, distinct};

/// The identity of a limit's stored state: algorithm, window, and (for `sliding_window`)
/// precision or (for `token_bucket`) rate and burst, (for `distinct`) precision and, for
/// a sketched one, its limit. Two limits of one shape on one key share their state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    tag: u8,
    precision: u32,
    window: u64,
    /// `[limit, burst]` for `token_bucket`, `[1, limit]` for a sketched `distinct`, else
    /// zeros.
    capacity: [u64; 2],
}

impl Shape {
    /// The shape of a limit of these parameters (computed once, when it is built: a
    /// store compares it on every check).
    pub(super) fn of(algorithm: Algorithm, limit: u64, window: u64, burst: u64) -> Shape {
        let (tag, precision, capacity) = match algorithm {
            Algorithm::FixedWindow => (0, 0, [0, 0]),
            Algorithm::SlidingLog => (1, 0, [0, 0]),
            Algorithm::SlidingWindow { precision, .. } => (2, precision, [0, 0]),
            Algorithm::TokenBucket => (3, 0, [limit, burst]),
            Algorithm::Gcra => (4, 0, [0, 0]),
            // Exact members and sketches are different states. An exact limit that
            // changes keeps what was seen; a sketch's filters are sized by its limit, so
            // a changed sketched limit starts empty.
            Algorithm::Distinct { precision } => {
                if distinct::is_exact(limit) {
                    (5, precision, [0, 0])
                } else {
                    (5, precision, [1, limit])
                }
            }
        };
        Shape {
            tag,
            precision,
            window,
            capacity,
        }
    }
}
