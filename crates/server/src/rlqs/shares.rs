//! How a bucket's limit is shared among the Envoys reporting it: each gets a floor,
//! the rest goes to demand, max-min fair (an Envoy asking for less than an even split
//! of what is left gets what it asks; the others split the rest), and what nobody asks
//! for is spread evenly, so an Envoy can grow until its next report. The shares add up
//! to the limit, never more. Then each share as a token bucket Envoy can run: whole
//! tokens a whole number of seconds, never faster than the share.

/// The part of a bucket's limit every Envoy reporting it gets whatever its demand, split
/// evenly: an Envoy that was idle can admit its first requests before its next report
/// moves the shares.
pub const FLOOR: f64 = 0.1;

/// A share below this (requests a second) is none: a rounding's worth (`quota.lua`'s
/// `TINY`).
pub const TINY: f64 = 1e-9;

/// The longest `fill_interval` a share is written with: a share below one request in
/// this long is written as one request in this long at most (never more than the share).
pub const MAX_FILL_SECS: u64 = 3600;

/// The share of `limit` (requests a second) of each Envoy whose demand (requests a
/// second, allowed and denied) is `demands[i]`: [`FLOOR`] of the limit split evenly,
/// the rest max-min fair on demand, what is left over split evenly. Adds up to `limit`.
pub fn shares(limit: f64, demands: &[f64]) -> Vec<f64> {
    let n = demands.len();
    if n == 0 || limit <= 0.0 {
        return vec![0.0; n];
    }
    let floor = limit * FLOOR / n as f64;
    let mut shares = vec![floor; n];
    let mut left = limit - floor * n as f64;
    // Water-filling on what each asks beyond its floor, the smallest first.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]));
    for (k, &i) in order.iter().enumerate() {
        let even = left / (n - k) as f64;
        let more = (demands[i] - floor).max(0.0).min(even);
        shares[i] += more;
        left -= more;
    }
    for share in &mut shares {
        *share += left / n as f64;
    }
    shares
}

/// A share as Envoy 1.40's token bucket takes it: `tokens` every `secs` seconds (whole
/// numbers both), never faster than `share` requests a second. The shortest interval
/// whose rate is within [`CLOSE`] of the share (a bucket holds one fill, so a shorter
/// interval is a smaller burst), else the closest over intervals up to a minute; a
/// share below one request a minute gets one request in as long as it takes, up to
/// [`MAX_FILL_SECS`]; `None` below even that (deny).
pub fn token_bucket(share: f64) -> Option<(u32, u64)> {
    if share.is_nan() || share <= 0.0 {
        return None;
    }
    let mut best: Option<(u32, u64)> = None;
    let mut best_rate = 0.0;
    for secs in 1..=60u64 {
        let tokens = (share * secs as f64).floor().min(u32::MAX as f64);
        let rate = tokens / secs as f64;
        // Better by more than rounding: a longer interval only when it is closer.
        if tokens >= 1.0 && rate > best_rate + 1e-9 {
            best = Some((tokens as u32, secs));
            best_rate = rate;
            if rate >= share * (1.0 - CLOSE) {
                break;
            }
        }
    }
    best.or_else(|| {
        // (Less a rounding's worth: 1 / (1 / 90) is a hair above 90.)
        let secs = (1.0 / share * (1.0 - 1e-12)).ceil();
        (secs <= MAX_FILL_SECS as f64).then_some((1, secs as u64))
    })
}

/// How far below its share a token bucket's rate may be for the shortest interval to do.
pub const CLOSE: f64 = 0.05;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn busy_envoys_get_most_of_the_limit_and_an_idle_one_its_floor() {
        // 10 a second; one idle, one at 2× an even third, one far above.
        let s = shares(10.0, &[0.0, 6.7, 100.0]);
        assert!((s.iter().sum::<f64>() - 10.0).abs() < 1e-9, "{s:?}");
        assert!(
            (s[0] - 1.0 / 3.0).abs() < 1e-9,
            "the idle one: its floor, {s:?}"
        );
        assert!(s[1] > 4.0 && s[2] > 4.0, "{s:?}");
        // Demand below the limit: each gets it, the rest spread evenly.
        let s = shares(10.0, &[1.0, 2.0]);
        assert!(
            (s[0] - 4.5).abs() < 1e-9 && (s[1] - 5.5).abs() < 1e-9,
            "{s:?}"
        );
    }

    #[test]
    fn a_share_is_written_as_whole_tokens_no_faster_than_it() {
        assert_eq!(token_bucket(10.0), Some((10, 1)));
        // 1.9 a second: 11 every 6 s is the first within 5% (19 every 10 s is exact,
        // and a burst of 19).
        assert_eq!(token_bucket(1.9), Some((11, 6)));
        assert_eq!(token_bucket(10.5), Some((10, 1)));
        assert_eq!(token_bucket(0.5), Some((1, 2)));
        assert_eq!(token_bucket(1.0 / 90.0), Some((1, 90)));
        assert_eq!(token_bucket(1.0 / 7200.0), None);
        assert_eq!(token_bucket(0.0), None);
    }

    proptest! {
        /// The shares add up to the limit (never more), none is negative, each is at
        /// least its floor, and an Envoy asking for no more than an even split gets at
        /// least what it asks.
        #[test]
        fn shares_add_up_to_the_limit(
            limit in 0.01f64..10_000.0,
            demands in prop::collection::vec(0.0f64..20_000.0, 1..12),
        ) {
            let s = shares(limit, &demands);
            let total: f64 = s.iter().sum();
            prop_assert!(total <= limit * (1.0 + 1e-9), "{total} > {limit}");
            prop_assert!(total >= limit * (1.0 - 1e-9), "{total} < {limit}");
            let n = demands.len() as f64;
            for (d, share) in demands.iter().zip(&s) {
                prop_assert!(*share >= limit * FLOOR / n * (1.0 - 1e-9));
                if *d <= limit / n {
                    prop_assert!(*share >= d * (1.0 - 1e-9), "{share} < {d}");
                }
            }
        }

        /// A token bucket never runs faster than its share, and loses little of it: at
        /// most 5%, or a sixtieth of a request a second.
        #[test]
        fn a_token_bucket_never_runs_faster_than_its_share(share in 0.0003f64..100_000.0) {
            let (tokens, secs) = token_bucket(share).unwrap();
            let rate = f64::from(tokens) / secs as f64;
            prop_assert!(rate <= share * (1.0 + 1e-12), "{rate} > {share}");
            if share >= 1.0 / 60.0 {
                prop_assert!(
                    rate >= share * (1.0 - CLOSE) - 1e-9 || share - rate <= 1.0 / 60.0 + 1e-9,
                    "{rate} of {share}"
                );
            }
        }
    }
}
