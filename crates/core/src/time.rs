//! `Timestamp`: wall-clock time as whole microseconds since the Unix epoch.
//!
//! Wall clock so that many nodes agree on window boundaries; microseconds so that
//! every timestamp Spillway will see (until year 2255) is exact in an IEEE double,
//! which is what Lua numbers in the Redis scripts are.

use std::fmt;
use std::time::Duration;

/// Microseconds since the Unix epoch.
///
/// ```
/// use spillway_core::Timestamp;
/// use std::time::Duration;
///
/// let t = Timestamp::from_secs(1_700_000_000);
/// assert_eq!(t.saturating_add(Duration::from_millis(1)).as_micros(), 1_700_000_000_001_000);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// A timestamp `micros` microseconds after the epoch.
    #[inline]
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros)
    }

    /// A timestamp `secs` seconds after the epoch.
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000))
    }

    /// Microseconds since the epoch.
    #[inline]
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// This timestamp moved `d` later (whole microseconds), saturating.
    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(micros(d)))
    }

    /// This timestamp moved `d` earlier (whole microseconds), saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(micros(d)))
    }

    /// Time elapsed from `earlier` to `self`; zero if `earlier` is later.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// Whole microseconds in `d`, saturating at `u64::MAX`.
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
