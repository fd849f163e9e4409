//! A `shares` tree as configured: its children ([`Share`], [`Shares`]), and what a
//! decision precomputes from them when the limit is built ([`Params`], [`Terms`]),
//! checked so that a tree that cannot keep its promises cannot be built.

use std::sync::Arc;

use super::{MAX_CHILDREN, MAX_LEVELS, MAX_WEIGHT, OTHERS};

/// One child of a tree: its guaranteed `rate` and `ceil` per the parent's window.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Share {
    pub(crate) rate: u64,
    pub(crate) ceil: u64,
    pub(crate) weight: u64,
    pub(crate) burst: u64,
}

impl Share {
    /// `rate` units per the parent's window always available to the child (0: none),
    /// up to `ceil` when it borrows; weight 1, burst 1.
    pub fn new(rate: u64, ceil: u64) -> Share {
        Share {
            rate,
            ceil,
            weight: 1,
            burst: 1,
        }
    }

    /// Its part of borrowed capacity against the other borrowers' (1 ..= 1000).
    pub fn weight(mut self, weight: u64) -> Share {
        self.weight = weight;
        self
    }

    /// The most it takes at once, of its guarantee and of its ceiling (default 1).
    pub fn burst(mut self, burst: u64) -> Share {
        self.burst = burst;
        self
    }

    /// `(rate, ceil, weight, burst)`.
    pub fn numbers(&self) -> (u64, u64, u64, u64) {
        (self.rate, self.ceil, self.weight, self.burst)
    }
}

impl std::fmt::Display for Shares {
    /// `search 300..800, *: 0..1000 w2 burst 5` (weight and burst when not 1).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, s)) in self.children.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name} {}..{}", s.rate, s.ceil)?;
            if s.weight != 1 {
                write!(f, " w{}", s.weight)?;
            }
            if s.burst != 1 {
                write!(f, " burst {}", s.burst)?;
            }
        }
        Ok(())
    }
}

/// A tree's children and priorities, for [`LimitBuilder::shares`](crate::LimitBuilder::shares).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shares {
    pub(crate) children: Vec<(String, Share)>,
    pub(crate) levels: u8,
    pub(crate) reserve: u64,
}

impl Shares {
    /// No children yet (every value falls under [`OTHERS`]), one priority level,
    /// reserve 0.2.
    pub fn new() -> Shares {
        Shares {
            children: Vec::new(),
            levels: 1,
            reserve: 200,
        }
    }

    /// Adds the child `name` ([`OTHERS`], `*`, names the one every unlisted value falls
    /// under; unless listed it has no guarantee, the parent's rate as its ceiling,
    /// weight 1 and burst 1).
    pub fn child(mut self, name: impl Into<String>, share: Share) -> Shares {
        self.children.push((name.into(), share));
        self
    }

    /// The children: name, share.
    pub fn children(&self) -> &[(String, Share)] {
        &self.children
    }

    /// How many priority levels, and the reserve in thousandths.
    pub fn levels(&self) -> (u8, u64) {
        (self.levels, self.reserve)
    }

    /// `levels` priorities (0 the highest; 1 ..= 9), and the part of the parent's
    /// borrowable burst, in thousandths, each level keeps from the next lower one's
    /// fair borrowers (half of it from its own excess ones).
    pub fn priorities(mut self, levels: u8, reserve_per_mille: u64) -> Shares {
        self.levels = levels;
        self.reserve = reserve_per_mille;
        self
    }
}

/// The level of the priority `value` names among `names` (highest first): its place in
/// the list; none, or a name not listed, is the lowest (a client cannot promote itself
/// by inventing one).
pub fn level(names: &[String], value: Option<&str>) -> u8 {
    value
        .and_then(|v| names.iter().position(|n| n == v))
        .unwrap_or(names.len().saturating_sub(1))
        .min(usize::from(MAX_LEVELS) - 1) as u8
}

/// The member of a request to a `shares` limit: its priority level (0 the highest),
/// as one ASCII digit, then its child's name.
pub fn member(child: &str, level: u8) -> Vec<u8> {
    let mut m = Vec::with_capacity(child.len() + 1);
    m.push(b'0' + level.min(MAX_LEVELS - 1));
    m.extend_from_slice(child.as_bytes());
    m
}

/// A GCRA's numbers: its scaled rate (units per µs = rate / unit), and `τ`, µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pace {
    /// Scaled units per µs, over `unit`.
    pub rate: u64,
    /// Scaled units per unit of cost.
    pub unit: u64,
    /// `τ`: how far ahead of now its TAT may be, µs.
    pub tolerance: u64,
}

impl Pace {
    /// `limit` per `window` µs, `burst` at once; `None` for a rate of 0.
    pub(crate) fn new(limit: u64, window: u64, burst: u64) -> Option<Pace> {
        if limit == 0 {
            return None;
        }
        let g = crate::limit::gcd(limit, window);
        let (rate, unit) = (limit / g, window / g);
        Some(Pace {
            rate,
            unit,
            tolerance: emission(burst, rate, unit),
        })
    }

    pub(super) fn emission(&self, cost: u64) -> u64 {
        emission(cost, self.rate, self.unit)
    }
}

/// `ceil(cost × unit / rate)` µs; past u64, never.
fn emission(cost: u64, rate: u64, unit: u64) -> u64 {
    cost.checked_mul(unit)
        .map_or(u64::MAX, |units| units.div_ceil(rate))
}

/// What a decision needs of one child at one priority, computed when the limit is
/// built (and sent to the Redis script as the request's member).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Terms {
    /// The parent's bands for this priority: fair, then excess (µs ahead of now).
    pub bands: [u64; 2],
    /// The child's guarantee; `None`: it has none.
    pub guarantee: Option<Pace>,
    /// The child's ceiling.
    pub ceiling: Pace,
    /// Its weight among borrowers.
    pub weight: u64,
    /// The most it takes at once.
    pub burst: u64,
    /// The pool's rate (the parent's less every guarantee; `None`: nothing unpromised,
    /// so every borrow asks at the excess band), and the fair share's tolerance, µs.
    pub pool: Option<Pace>,
}

/// A child's name and its terms per priority level.
type Child = (Box<[u8]>, Box<[Terms]>);

/// A `shares` limit's parameters: the parent's, and each child's terms per level.
/// One pointer: a `Limit` of any algorithm stays as small as its largest other.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Params(Arc<Inner>);

impl std::ops::Deref for Params {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// What [`Params`] points at.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Inner {
    /// As given (with `*` when it was not).
    pub(super) spec: Shares,
    pub(super) parent: Pace,
    pub(super) wait: u64,
    /// Sorted by name, `*` among them.
    pub(super) children: Arc<[Child]>,
}

/// Why a tree cannot be built.
pub(crate) fn validate(
    shares: &Shares,
    limit: u64,
    window: u64,
    burst: u64,
    wait: u64,
) -> Result<Params, String> {
    let Shares {
        children,
        levels,
        reserve,
    } = shares;
    if *levels == 0 || *levels > MAX_LEVELS {
        return Err(format!(
            "priorities: {levels} levels (expected 1 to {MAX_LEVELS})"
        ));
    }
    let steps = 2 * u64::from(*levels) - 1;
    if *reserve * steps >= 2000 {
        return Err(format!(
            "reserve {}: {levels} priorities would keep the whole burst from the lowest \
             (at most {} with {levels})",
            *reserve as f64 / 1000.0,
            (1999 / steps) as f64 / 1000.0
        ));
    }
    if children.len() > MAX_CHILDREN {
        return Err(format!(
            "{} children: at most {MAX_CHILDREN} (each decision reads its tree whole)",
            children.len()
        ));
    }
    let mut all: Vec<(String, Share)> = children.clone();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = all.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!("child `{}` is listed twice", w[0].0));
    }
    if !all.iter().any(|(n, _)| n == OTHERS) {
        let others = Share::new(0, limit);
        let at = all.partition_point(|(n, _)| n.as_str() < OTHERS);
        all.insert(at, (OTHERS.to_string(), others));
    }
    let mut promised = 0u64;
    let mut guaranteed_bursts = 0u64;
    let mut widest = 0u64;
    for (name, s) in &all {
        let what = |msg: String| Err(format!("child `{name}`: {msg}"));
        if name.is_empty() || name.len() > 256 {
            return what("a name of 1 to 256 bytes".into());
        }
        if s.ceil == 0 || s.ceil < s.rate {
            return what(format!(
                "ceil {} is below its rate {} (or 0)",
                s.ceil, s.rate
            ));
        }
        if s.ceil > limit {
            return what(format!(
                "ceil {} is above the parent's limit {limit}",
                s.ceil
            ));
        }
        if s.weight == 0 || s.weight > MAX_WEIGHT {
            return what(format!("weight {} (expected 1 to {MAX_WEIGHT})", s.weight));
        }
        if s.burst == 0 || s.burst > burst {
            return what(format!(
                "burst {} (expected 1 to the parent's burst {burst})",
                s.burst
            ));
        }
        promised += s.rate;
        if s.rate > 0 {
            guaranteed_bursts += s.burst;
        }
        widest = widest.max(s.burst);
    }
    if promised > limit {
        return Err(format!(
            "the children's rates add up to {promised}, more than the parent's {limit}: \
             a guarantee must be there when its child asks"
        ));
    }
    let parent = Pace::new(limit, window, burst).expect("limit ≥ 1");
    // What borrowers may fill: the parent's burst less every guaranteed burst and the
    // longest wait, which guaranteed traffic must always find free.
    let room = parent
        .tolerance
        .saturating_sub(parent.emission(guaranteed_bursts))
        .saturating_sub(wait);
    let band = |step: u64| {
        let kept = u128::from(room) * u128::from(*reserve) * u128::from(step) / 2000;
        room - kept as u64
    };
    let lowest = band(steps);
    if lowest < parent.emission(widest) {
        return Err(format!(
            "the parent's burst {burst} leaves borrowers too little: after the guaranteed \
             bursts ({guaranteed_bursts}), the longest wait and the priorities' reserve, \
             the lowest priority could not borrow a burst of {widest}; raise the parent's \
             burst"
        ));
    }
    let pool = Pace::new(limit - promised, window, burst);
    let all_spec = all.clone();
    let mut out = Vec::with_capacity(all.len());
    for (name, s) in all {
        let guarantee = Pace::new(s.rate, window, s.burst);
        let ceiling = Pace::new(s.ceil, window, s.burst).expect("ceil ≥ 1");
        for pace in guarantee.iter().chain([&ceiling]).chain(pool.iter()) {
            if u128::from(burst) * u128::from(pace.unit) > u128::from(crate::MAX_EXACT) {
                return Err(format!(
                    "child `{name}`: a burst of {burst} at its rates is more than 2^53 µs \
                     × units; pick rates that divide the window more evenly"
                ));
            }
        }
        let terms = (0..u64::from(*levels))
            .map(|k| Terms {
                bands: [band(2 * k), band(2 * k + 1)],
                guarantee,
                ceiling,
                weight: s.weight,
                burst: s.burst,
                pool,
            })
            .collect();
        out.push((name.into_bytes().into_boxed_slice(), terms));
    }
    Ok(Params(Arc::new(Inner {
        spec: Shares {
            children: all_spec,
            levels: *levels,
            reserve: *reserve,
        },
        parent,
        wait,
        children: out.into(),
    })))
}
