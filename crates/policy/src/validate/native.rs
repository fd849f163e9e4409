//! A native limit (the `algorithm:` / `limit:` / `window:` form) read into a
//! [`Limit`] and its [`Sharing`], or the sub-field at fault.

use spillway_core::algorithm::shares::{Share, Shares};
use spillway_core::{Algorithm, Calendar, Edge, Limit, Period, Sharing};

use crate::raw;
use crate::{Priorities, Unit};

/// A native limit read: the limit, its window as a unit (when it is one), how servers
/// share it, and a `shares` limit's priorities.
pub(super) type Native = (Limit, Option<Unit>, Sharing, Option<Priorities>);

/// A native limit with its sharing, or the sub-field at fault and what is wrong with it.
pub(super) fn native_limit(l: &raw::NativeLimit) -> Result<Native, (&'static str, String)> {
    let algorithm = match &l.algorithm {
        Some(a) => a
            .parse::<Algorithm>()
            .map_err(|e| ("algorithm", message(e)))?,
        None => Algorithm::FixedWindow,
    };
    let calendar = calendar(l)?;
    let window = match (&l.window, &l.unit, &calendar) {
        (Some(_), Some(_), _) => return Err(("window", "set window or unit, not both".into())),
        (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            return Err((
                "period",
                "set a window, a unit or a calendar period, one of them".into(),
            ));
        }
        (None, None, None) if algorithm.holds() => {
            spillway_core::algorithm::concurrency::DEFAULT_LEASE
        }
        (None, None, None) => {
            return Err((
                "window",
                "a limit needs a window (`90s`, `1m`), a unit or a calendar period".into(),
            ));
        }
        (Some(w), None, None) => crate::duration::parse(w).map_err(|e| ("window", e))?,
        (None, Some(u), None) => u.parse::<Unit>().map_err(|e| ("unit", e))?.duration(),
        (None, None, Some(c)) => c.period().longest(),
    };
    let algorithm = match algorithm {
        Algorithm::SlidingWindow { .. } => Algorithm::SlidingWindow {
            precision: l.precision.unwrap_or(1),
            edge: match &l.edge {
                Some(e) => e.parse::<Edge>().map_err(|e| ("edge", message(e)))?,
                None => Edge::default(),
            },
        },
        Algorithm::Distinct { .. } if l.edge.is_none() => Algorithm::Distinct {
            precision: l.precision.unwrap_or(1),
        },
        other => {
            if l.precision.is_some() || l.edge.is_some() {
                return Err((
                    "precision",
                    format!(
                        "precision applies to sliding_window and distinct, edge to \
                         sliding_window; not to {}",
                        other.name()
                    ),
                ));
            }
            other
        }
    };
    let has_calendar = calendar.is_some();
    let mut b = Limit::builder(algorithm, l.limit, window).count_rejected(l.count_rejected);
    if let Some(c) = calendar {
        b = b.calendar(c);
    }
    if let Some(burst) = l.burst {
        b = b.burst(burst);
    }
    if let Some(wait) = &l.max_wait {
        b = b.max_wait(crate::duration::parse(wait).map_err(|e| ("max_wait", e))?);
    }
    if let Some(parts) = &l.alert_at {
        b = b.alert_at(&thousandths(parts)?);
    }
    let (tree, priorities) = shares(l, algorithm)?;
    if let Some(tree) = tree {
        b = b.shares(tree);
    }
    let limit = b.build().map_err(|e| {
        let text = e.to_string();
        let field = if text.contains("leaves borrowers too little") {
            "burst"
        } else if l.max_wait.is_some() && text.contains("max_wait") {
            "max_wait"
        } else if text.contains("child `") {
            "children"
        } else if text.contains("alert_at") {
            "alert_at"
        } else if text.contains("priorities") || text.contains("reserve") {
            "reserve"
        } else {
            ""
        };
        (field, message(e))
    })?;
    let (sharing, field) = match (l.lease, &l.sync) {
        (Some(_), Some(_)) => return Err(("lease", "set lease or sync, not both".into())),
        (Some(units), None) => (Sharing::Lease { units }, "lease"),
        (None, Some(every)) => (
            Sharing::Sync {
                every: crate::duration::parse(every).map_err(|e| ("sync", e))?,
            },
            "sync",
        ),
        (None, None) => (Sharing::Exact, ""),
    };
    sharing.check(&limit).map_err(|e| (field, e))?;
    if sharing.is_shared() && !limit.max_wait().is_zero() {
        return Err((
            "max_wait",
            "a wait is reserved in the store: no lease or sync".into(),
        ));
    }
    if !limit.alert_at().is_empty() && sharing.is_shared() {
        return Err((
            field,
            "a limit with alert_at is decided in the store, where a threshold is reached \
             once across servers: no lease or sync"
                .into(),
        ));
    }
    if has_calendar && sharing.is_shared() {
        return Err((
            field,
            "a calendar period takes no lease or sync (yet)".into(),
        ));
    }
    if l.metered {
        metered(&limit, sharing)?;
    }
    Ok((limit, Unit::of_window(window), sharing, priorities))
}

/// A `shares` limit's tree and its priorities, when it has them.
type Tree = (Option<Shares>, Option<Priorities>);

/// A `shares` limit's tree (`children`, `priorities`, `reserve`) and where its
/// requests name their priority (`priority`); refused on every other algorithm.
fn shares(l: &raw::NativeLimit, algorithm: Algorithm) -> Result<Tree, (&'static str, String)> {
    if !algorithm.shares() {
        let set = [
            ("children", l.children.is_some()),
            ("priority", l.priority.is_some()),
            ("priorities", l.priorities.is_some()),
            ("reserve", l.reserve.is_some()),
        ];
        return match set.iter().find(|(_, set)| *set) {
            Some((field, _)) => Err((
                field,
                format!("{field} applies to shares, not {}", algorithm.name()),
            )),
            None => Ok((None, None)),
        };
    }
    let mut tree = Shares::new();
    for (name, c) in l.children.iter().flatten() {
        let share = Share::new(c.rate, c.ceil.unwrap_or(l.limit))
            .weight(c.weight.unwrap_or(1))
            .burst(c.burst.unwrap_or(1));
        tree = tree.child(name.clone(), share);
    }
    let reserve = match l.reserve {
        None => 200,
        Some(r) if r > 0.0 && r < 1.0 => (r * 1000.0).round() as u64,
        Some(r) => return Err(("reserve", format!("reserve {r} is not between 0 and 1"))),
    };
    let priorities = match (&l.priority, &l.priorities) {
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err((
                "priority",
                "set priority (the descriptor entry naming it) and priorities (its names, \
                 highest first) together"
                    .into(),
            ));
        }
        (Some(key), Some(names)) => {
            Some(Priorities::new(key, names).map_err(|e| ("priorities", e))?)
        }
    };
    let levels = priorities.as_ref().map_or(1, Priorities::levels);
    Ok((Some(tree.priorities(levels, reserve)), priorities))
}

/// Refuses `metered` where usage cannot be charged in full: a `distinct` limit counts
/// members, not units, a `concurrency` one holds; `count_rejected` charges denials, which a metered limit never has
/// (its hits above 0 always land); a lease or sync counts ahead of the store.
fn metered(limit: &Limit, sharing: Sharing) -> Result<(), (&'static str, String)> {
    let why = if !limit.max_wait().is_zero() {
        "a metered limit charges usage after the fact, which never waits: no max_wait"
    } else if limit.algorithm().counts_members() {
        "a distinct limit counts members, not units: it cannot be metered"
    } else if limit.algorithm().holds() {
        "a concurrency limit counts holds, taken and given back, not units: it cannot be metered"
    } else if limit.algorithm().shares() {
        "a shares limit decides guaranteed or borrowed before a request goes: it cannot be \
         metered"
    } else if limit.count_rejected() {
        "a metered limit charges every hit above 0 in full: count_rejected does not apply"
    } else if sharing.is_shared() {
        "a metered limit charges the store in full: no lease or sync"
    } else {
        return Ok(());
    };
    Err(("metered", why.to_owned()))
}

/// Budget alert thresholds as the core takes them, in thousandths of the limit: each
/// above 0 and up to 1 with at most three decimals (the core checks the order).
fn thousandths(parts: &[f64]) -> Result<Vec<u16>, (&'static str, String)> {
    parts
        .iter()
        .map(|&t| {
            let k = (t * 1000.0).round();
            if t > 0.0 && t <= 1.0 && (t * 1000.0 - k).abs() < 1e-6 {
                Ok(k as u16)
            } else {
                Err((
                    "alert_at",
                    format!("{t} is not a part of the limit above 0 and up to 1, in thousandths"),
                ))
            }
        })
        .collect()
}

/// The limit's calendar period, when it has one (`period`, and `time_zone`, UTC by
/// default); a `time_zone` without a `period` is refused.
fn calendar(l: &raw::NativeLimit) -> Result<Option<Calendar>, (&'static str, String)> {
    let Some(period) = &l.period else {
        return match l.time_zone {
            Some(_) => Err(("time_zone", "time_zone applies to a calendar period".into())),
            None => Ok(None),
        };
    };
    let period = period.parse::<Period>().map_err(|e| ("period", e))?;
    let zone = l.time_zone.as_deref().unwrap_or("UTC");
    Calendar::new(period, zone)
        .map(Some)
        .map_err(|e| ("time_zone", message(e)))
}

/// The core's message without its `invalid limit: ` prefix (the field already says where).
fn message(e: spillway_core::Error) -> String {
    match e {
        spillway_core::Error::InvalidLimit(m) => m,
        other => other.to_string(),
    }
}
