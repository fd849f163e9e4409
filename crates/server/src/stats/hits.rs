//! How the reference splits one rule's hits among its stats. Its counter is a fixed
//! window charged with every hit, so it knows the count before (`before`) and after
//! (`after = before + hits`) each request; a decision here carries the same: `remaining`
//! after an admission, and before a denial (whether or not the denial was charged:
//! `Decision::remaining`), so a charge that crosses the limit splits as the reference
//! splits it.

/// One rule's decision, in the reference's stats (`total_hits` and the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hits {
    pub total: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
}

/// The reference's stats for `hits` decided against `limit`, with `remaining` units
/// left (after the hits when `allowed`, before them when not), near the limit past
/// `near_ratio` of it, in shadow mode or not.
///
/// As the reference's: every hit counts in `total_hits`. Admitted: all in
/// `within_limit`, and those past `floor(limit × near_ratio)` in `near_limit`. Refused:
/// those past the limit in `over_limit`, those between the near threshold and the limit
/// in `near_limit` (all in `over_limit` when the count was already at the limit); a
/// shadow rule that would refuse counts them in `shadow_mode` as well.
pub fn hits(
    limit: u64,
    remaining: u64,
    allowed: bool,
    hits: u64,
    near_ratio: f64,
    shadow: bool,
) -> Hits {
    let near = (limit as f64 * near_ratio).floor() as u64;
    let mut out = Hits {
        total: hits,
        ..Hits::default()
    };
    if allowed {
        let after = limit.saturating_sub(remaining);
        let before = after.saturating_sub(hits);
        out.within_limit = hits;
        if after > near {
            out.near_limit = if before >= near { hits } else { after - near };
        }
    } else {
        let before = limit.saturating_sub(remaining);
        let after = before.saturating_add(hits);
        if remaining == 0 || before >= limit {
            out.over_limit = hits;
        } else {
            out.over_limit = after - limit;
            out.near_limit = limit - near.max(before);
        }
        if shadow {
            out.shadow_mode = hits;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's own cases: limit 10, near at 8 (ratio 0.8).
    #[test]
    fn splits_as_the_reference_does() {
        // 1 hit taking the count from 0 to 1: within, not near.
        assert_eq!(
            hits(10, 9, true, 1, 0.8, false),
            Hits {
                total: 1,
                within_limit: 1,
                ..Hits::default()
            }
        );
        // 3 hits taking it from 6 to 9: 1 of them past 8 is near.
        assert_eq!(
            hits(10, 1, true, 3, 0.8, false),
            Hits {
                total: 3,
                within_limit: 3,
                near_limit: 1,
                ..Hits::default()
            }
        );
        // From 8 to 10: both near.
        assert_eq!(
            hits(10, 0, true, 2, 0.8, false),
            Hits {
                total: 2,
                within_limit: 2,
                near_limit: 2,
                ..Hits::default()
            }
        );
        // 5 hits refused at 7: 2 over (to 12), near from max(8, 7) to 10 = 2.
        assert_eq!(
            hits(10, 3, false, 5, 0.8, false),
            Hits {
                total: 5,
                over_limit: 2,
                near_limit: 2,
                ..Hits::default()
            }
        );
        // Already at the limit: all over.
        assert_eq!(
            hits(10, 0, false, 600, 0.8, false),
            Hits {
                total: 600,
                over_limit: 600,
                ..Hits::default()
            }
        );
        // In shadow mode the refused hits count there too.
        assert_eq!(
            hits(10, 0, false, 1, 0.8, true),
            Hits {
                total: 1,
                over_limit: 1,
                shadow_mode: 1,
                ..Hits::default()
            }
        );
        // A rule of 0 refuses everything, all over.
        assert_eq!(
            hits(0, 0, false, 4, 0.8, false),
            Hits {
                total: 4,
                over_limit: 4,
                ..Hits::default()
            }
        );
    }
}
