//! How the servers that share a limit through a remote store split the work:
//! [`Sharing::Exact`] (every decision is a store call), a quota [`Lease`](Sharing::Lease)
//! or a batched [`Sync`](Sharing::Sync). Each says what it gives up in
//! [`Sharing::bound`]; the derivations are in docs/algorithms.md ("Leases and sync").
//!
//! Both are for `fixed_window` limits only. Why the others are refused:
//!
//! - A leased unit is charged when it is leased and spent later. `token_bucket`, `gcra`
//!   and `sliding_log` credit the time since a charge (the bucket refills, the log entry
//!   ages out), so a unit spent late would be counted as older than it is, and a window
//!   that starts after the lease could hold more than the limit. A fixed window's count
//!   only depends on which window a unit was charged in: a lease that expires with its
//!   window spends every unit in the window that counted it, so it can never over-admit.
//! - `sync` counts locally against the last known window count, which needs the
//!   window's edges: a fixed window's are in every reply (`reset_after`); a sliding
//!   window's sub-bucket edges are on the store's clock and are not.

use std::future::Future;
use std::time::Duration;

use crate::Limit;
use crate::algorithm::Algorithm;

/// The shortest `sync` interval: flushes are driven by a ticker of this resolution.
pub const MIN_SYNC: Duration = Duration::from_millis(10);

/// Calls `flush` every [`MIN_SYNC`] until it returns `false`: spawn it with a flush of
/// a [`GuardedStore`](crate::GuardedStore) whose limits sync. A late tick delays the
/// next one; flushes never pile up.
pub async fn every_tick<F, Fut>(mut flush: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut tick = tokio::time::interval(MIN_SYNC);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !flush().await {
            return;
        }
    }
}

/// How the servers sharing a limit decide on it. See the [module docs](self).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// Every decision is one store call: exact.
    #[default]
    Exact,
    /// Take up to `units` from the store in one call and admit locally from them until
    /// they run out or the window ends (unspent units are lost with the window). Never
    /// over-admits; under-admits by at most `units` per server per window.
    Lease {
        /// The most units taken at once.
        units: u64,
    },
    /// Admit against the last known window count plus this server's own hits since, and
    /// add those hits to the store every `every` (one call for up to 64 keys). Never
    /// under-admits; over-admits by at most what the servers admit in `2 × every`.
    Sync {
        /// The flush interval.
        every: Duration,
    },
}

impl Sharing {
    /// Whether decisions leave the store call (a lease or sync).
    pub fn is_shared(self) -> bool {
        self != Sharing::Exact
    }

    /// Refuses a sharing that cannot keep its bound for `limit`; the message names the
    /// reason.
    pub fn check(self, limit: &Limit) -> Result<(), String> {
        let what = match self {
            Sharing::Exact => return Ok(()),
            Sharing::Lease { units: 0 } => return Err("lease must be at least 1".into()),
            Sharing::Lease { units } if units > limit.limit() => {
                return Err(format!(
                    "lease {units} is larger than the limit {}",
                    limit.limit()
                ));
            }
            Sharing::Lease { .. } if limit.count_rejected() => {
                return Err(
                    "lease does not apply to a count_rejected limit: a denied lease \
                            request would charge the whole lease"
                        .into(),
                );
            }
            Sharing::Lease { .. } => "lease",
            Sharing::Sync { every } if every < MIN_SYNC => {
                return Err(format!("sync must be at least {}ms", MIN_SYNC.as_millis()));
            }
            Sharing::Sync { every } if every >= limit.window() => {
                return Err("sync must be shorter than the window".into());
            }
            Sharing::Sync { .. } => "sync",
        };
        match limit.algorithm() {
            Algorithm::FixedWindow => Ok(()),
            Algorithm::SlidingWindow { .. } => Err(format!(
                "{what} applies to fixed_window only: a sliding window's sub-bucket edges are \
                 on the store's clock, which a server does not see"
            )),
            Algorithm::Concurrency => Err(format!(
                "{what} applies to fixed_window only: a concurrency limit's holds are taken \
                 and given back one by one, in the store"
            )),
            other => Err(format!(
                "{what} applies to fixed_window only: {} credits the time since a charge, so \
                 units counted before they are spent could exceed the limit in a later window",
                other.name()
            )),
        }
    }

    /// The error bound in words, for `spillway validate`.
    pub fn bound(self) -> String {
        match self {
            Sharing::Exact => "exact".into(),
            Sharing::Lease { units } => {
                format!("never over; may under-admit by up to {units} per server per window")
            }
            Sharing::Sync { every } => format!(
                "never under; may over-admit by up to what the servers admit in {} \
                 (2 × sync) per window",
                fmt_duration(every * 2)
            ),
        }
    }
}

/// `exact`, `lease 20`, `sync 100ms`: as written in a policy.
impl std::fmt::Display for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sharing::Exact => f.write_str("exact"),
            Sharing::Lease { units } => write!(f, "lease {units}"),
            Sharing::Sync { every } => write!(f, "sync {}", fmt_duration(*every)),
        }
    }
}

fn fmt_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
