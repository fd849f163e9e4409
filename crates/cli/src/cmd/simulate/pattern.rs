//! Traffic patterns: arrival times in µs after the start, sorted, deterministic for a seed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};

use super::Pattern;

/// The most requests one simulation may generate (memory: 17 bytes each per algorithm).
pub const MAX_REQUESTS: usize = 20_000_000;

/// What the patterns are shaped by.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub limit: u64,
    pub window: u64,
    pub duration: u64,
    /// Mean requests per second.
    pub rate: f64,
    pub seed: u64,
}

/// Arrival times for `pattern`, or why it would be too large.
pub fn arrivals(pattern: Pattern, s: Shape) -> Result<Vec<u64>, String> {
    let expected = match pattern {
        Pattern::Boundary => 2.0 * s.limit as f64 * (s.duration / s.window / 2 + 1) as f64,
        _ => {
            s.rate * s.duration as f64 / 1e6
                * if pattern == Pattern::Adversarial {
                    4.0
                } else {
                    1.0
                }
        }
    };
    if expected > MAX_REQUESTS as f64 {
        return Err(format!(
            "the {pattern:?} pattern would generate about {expected:.0} requests, the most is {MAX_REQUESTS}; \
             lower --rate, --limit or --duration"
        ));
    }
    let mut rng = StdRng::seed_from_u64(s.seed);
    let mut out = match pattern {
        Pattern::Uniform => uniform(0, s.duration, s.rate),
        Pattern::Poisson => poisson(&mut rng, s),
        Pattern::Bursts => bursts(s),
        Pattern::Boundary => boundary(s),
        Pattern::Adversarial => adversarial(&mut rng, s),
    };
    out.retain(|&t| t < s.duration);
    out.sort_unstable();
    Ok(out)
}

/// Evenly spaced at `rate` per second over `[from, to)`.
fn uniform(from: u64, to: u64, rate: f64) -> Vec<u64> {
    let gap = 1e6 / rate;
    let n = ((to - from) as f64 / gap).ceil() as u64;
    (0..n)
        .map(|i| from + (i as f64 * gap) as u64)
        .filter(|&t| t < to)
        .collect()
}

/// `n` requests spread evenly over `[at, at + spread)`.
fn spread(at: u64, n: u64, spread: u64) -> impl Iterator<Item = u64> {
    (0..n).map(move |i| at + i * spread / n.max(1))
}

fn poisson(rng: &mut StdRng, s: Shape) -> Vec<u64> {
    let gap = Exp::new(s.rate / 1e6).expect("rate is positive");
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        t += gap.sample(rng);
        if t >= s.duration as f64 {
            return out;
        }
        out.push(t as u64);
    }
}

/// Bursts of `limit` requests within 1% of the window, one every `limit / rate` seconds.
fn bursts(s: Shape) -> Vec<u64> {
    let period = ((s.limit as f64 / s.rate) * 1e6).max(1.0) as u64;
    let width = (s.window / 100).max(1);
    (0..s.duration.div_ceil(period))
        .flat_map(|k| spread(k * period, s.limit, width))
        .collect()
}

/// `limit` requests in the last 1% of a window and `limit` in the first 1% of the
/// next, at every other window edge (so each attack meets a rested limiter).
fn boundary(s: Shape) -> Vec<u64> {
    let width = (s.window / 100).max(1);
    (1..)
        .step_by(2)
        .map(|k| k * s.window)
        .take_while(|&edge| edge < s.duration)
        .flat_map(|edge| spread(edge - width, s.limit, width).chain(spread(edge, s.limit, width)))
        .collect()
}

/// Random bursts aimed just before and after window and sub-bucket edges, trickles
/// at up to 4× the rate, and pauses.
fn adversarial(rng: &mut StdRng, s: Shape) -> Vec<u64> {
    let mut out = Vec::new();
    let mut t = 0;
    let jitter = (s.window / 50).max(1);
    while t < s.duration {
        match rng.random_range(0..3) {
            0 => {
                let unit = (s.window / [1, 2, 4, 10, 60][rng.random_range(0..5)]).max(1);
                let edge = (t / unit + 1) * unit;
                let start = edge.saturating_sub(rng.random_range(0..=jitter)).max(t);
                let width = rng.random_range(0..=jitter);
                out.extend(spread(start, rng.random_range(1..=s.limit), width));
                t = start + width + 1;
            }
            1 => {
                let len = rng.random_range(1..=s.window);
                out.extend(uniform(t, t + len, s.rate * rng.random_range(0.5..4.0)));
                t += len;
            }
            _ => t += rng.random_range(1..=s.window),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            limit: 10,
            window: 1_000_000,
            duration: 10_000_000,
            rate: 20.0,
            seed: 7,
        }
    }

    #[test]
    fn boundary_puts_limit_on_each_side_of_every_other_edge() {
        let a = arrivals(Pattern::Boundary, shape()).unwrap();
        assert_eq!(a.len(), 5 * 20);
        assert_eq!(
            a.iter()
                .filter(|&&t| (990_000..1_000_000).contains(&t))
                .count(),
            10
        );
        assert_eq!(
            a.iter()
                .filter(|&&t| (1_000_000..1_010_000).contains(&t))
                .count(),
            10
        );
    }

    #[test]
    fn random_patterns_are_deterministic_for_a_seed_and_differ_across_seeds() {
        for p in [Pattern::Poisson, Pattern::Adversarial] {
            let a = arrivals(p, shape()).unwrap();
            assert_eq!(a, arrivals(p, shape()).unwrap());
            assert_ne!(a, arrivals(p, Shape { seed: 8, ..shape() }).unwrap());
        }
    }

    #[test]
    fn rates_are_what_was_asked() {
        assert_eq!(arrivals(Pattern::Uniform, shape()).unwrap().len(), 200);
        let poisson = arrivals(Pattern::Poisson, shape()).unwrap().len();
        assert!((150..250).contains(&poisson), "{poisson}");
        assert_eq!(arrivals(Pattern::Bursts, shape()).unwrap().len(), 200);
    }

    #[test]
    fn refuses_patterns_too_large_to_hold() {
        let huge = Shape {
            rate: 1e9,
            ..shape()
        };
        assert!(
            arrivals(Pattern::Uniform, huge)
                .unwrap_err()
                .contains("the most is")
        );
    }
}
