//! Shares that borrow: a parent rate over children, each with a guaranteed `rate` and
//! a `ceil` it may reach by borrowing what the others leave, borrowed capacity shared
//! by weight, and priorities that shed the least important borrower first. Linux's HTB
//! (`rate` / `ceil`) and Kubernetes' API Priority and Fairness, as one GCRA decision.
//!
//! One key holds a whole tree: the parent's TAT, and per child that asked lately its
//! own three TATs (guarantee, ceiling, fair share) and when it last asked to borrow.
//! The request's member names its child and its priority (see [`member`]).
//!
//! A request of cost c from child i at priority k:
//! 1. **Guaranteed**: if i's guarantee (a GCRA at `rate_i`, burst `b_i`) conforms now,
//!    it is admitted; the parent's and i's ceiling TATs move too, whatever they say.
//! 2. **Borrowed**: else it may borrow if i's ceiling (a GCRA at `ceil_i`, burst `b_i`)
//!    and the parent conform at the request's *band*: the parent admits a borrower
//!    only while its TAT is at most `band` ahead of now, and the bands are lower for
//!    lower priorities, and lower again for a child past its fair share. A borrow that
//!    conforms within `max_wait` is admitted after that wait, its slot reserved now.
//! 3. Else denied, until the sooner of its guarantee and its borrow (after the wait).
//!
//! Fair share: a child that asked to borrow within [`ACTIVE`] is active; child i's
//! fair share of the *pool* (the parent's rate less every guarantee) is its weight's
//! part of the active children's weights. A fourth GCRA per child counts its borrowed
//! units at that rate, recomputed each time (so it follows the active set): a borrow
//! within it (tolerance: the pool's time for the parent's burst) asks the parent at
//! the priority's *fair* band, one past it at the lower *excess* band. Under
//! contention the parent's TAT sits near the highest band in demand, so fair
//! borrowers are admitted before excess ones, and higher priorities before lower.
//!
//! The promises (docs/algorithms.md):
//! - The parent admits no more than its GCRA promises (its burst + rate, counted when
//!   each request goes ahead): every path checks it.
//! - A child's guarantee is honoured while it asks for it: the bands leave the
//!   parent's burst less every guaranteed burst (and the longest wait) to borrowers,
//!   and guarantees sum to at most the parent's rate, so guaranteed traffic always
//!   finds the parent conforming (`LimitBuilder::shares` checks both).
//! - A child never exceeds its ceiling plus its guaranteed burst.
//! - Work conserving: a band is a burst, not a rate: while the children's demand
//!   within their ceilings exceeds the parent's rate, the parent admits its rate.
//!
//! State: 8 bytes, plus 40 + the name per child seen lately; a child idle for
//! [`ACTIVE`] is dropped.

use std::sync::Arc;

use super::meter::{Meter, allow, deny, waited};
use crate::decision::Decision;

/// How long after it last asked to borrow a child counts as active (its weight in
/// the fair shares): a second, µs.
pub const ACTIVE: u64 = 1_000_000;

/// A denied borrower marks itself active at most this often (a denial writes then).
pub const MARK_EVERY: u64 = 100_000;

/// The most children a tree may list: every decision reads the tree whole.
pub const MAX_CHILDREN: usize = 64;

/// The most priority levels.
pub const MAX_LEVELS: u8 = 9;

/// The largest weight.
pub const MAX_WEIGHT: u64 = 1000;

/// The child every value a tree does not list falls under.
pub const OTHERS: &str = "*";

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

    fn emission(&self, cost: u64) -> u64 {
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
    spec: Shares,
    parent: Pace,
    wait: u64,
    /// Sorted by name, `*` among them.
    children: Arc<[Child]>,
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

/// One child's state in a tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub(crate) name: Box<[u8]>,
    /// Its weight when it last wrote (the others' fair shares read it).
    pub(crate) weight: u64,
    /// TATs: guarantee, ceiling, fair share.
    pub(crate) g: u64,
    pub(crate) c: u64,
    pub(crate) f: u64,
    /// When it last asked to borrow.
    pub(crate) asked: u64,
}

/// A tree's state: the parent's TAT, and the children seen lately, in no order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    pub(crate) parent: u64,
    pub(crate) children: Vec<Entry>,
}

impl Tree {
    pub(crate) fn heap_bytes(&self) -> usize {
        self.children.capacity() * std::mem::size_of::<Entry>()
            + self.children.iter().map(|e| e.name.len()).sum::<usize>()
    }
}

/// How a request is admitted, or why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Within the child's guarantee.
    Guaranteed,
    /// Borrowed from the parent.
    Borrowed {
        /// After this wait, µs.
        wait: u64,
        /// Within the child's fair share of the pool (else past it: the excess band).
        fair: bool,
    },
    /// Denied.
    Denied {
        /// Until this many µs from now.
        retry: u64,
        /// Whether it asked within its fair share.
        fair: bool,
    },
}

/// Everything a decision computed, for `check`, `commit` and `explain`.
struct Plan {
    path: Path,
    /// New TATs: guarantee, ceiling, fair share, parent.
    g: u64,
    c: u64,
    f: u64,
    p: u64,
}

impl Params {
    /// The terms of the child `member` names at its level; an unlisted child is `*`,
    /// an unknown level the lowest. `None`: no member.
    pub fn terms(&self, member: &[u8]) -> Option<(&[u8], &Terms)> {
        let (&digit, name) = member.split_first()?;
        let i = match self.children.binary_search_by(|(n, _)| (**n).cmp(name)) {
            Ok(i) => i,
            Err(_) => self
                .children
                .binary_search_by(|(n, _)| (**n).cmp(OTHERS.as_bytes()))
                .expect("`*` is always listed"),
        };
        let (name, levels) = &self.children[i];
        let level = usize::from(digit.wrapping_sub(b'0')).min(levels.len() - 1);
        Some((name, &levels[level]))
    }

    /// The tree as given, `*` included, children sorted by name.
    pub fn spec(&self) -> &Shares {
        &self.spec
    }

    /// Whether the tree lists the child `name`.
    pub fn lists(&self, name: &[u8]) -> bool {
        self.children
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .is_ok()
    }

    /// The parent's pace and the longest wait (µs), as the script is given them.
    pub fn parent(&self) -> (Pace, u64) {
        (self.parent, self.wait)
    }

    fn plan(&self, s: &Tree, now: u64, cost: u64, name: &[u8], t: &Terms) -> Plan {
        let me = s.children.iter().find(|e| *e.name == *name);
        let (g0, c0, f0) = me.map_or((0, 0, 0), |e| (e.g, e.c, e.f));
        let (ep, ec) = (
            self.parent.emission(cost).min(crate::MAX_EXACT),
            t.ceiling.emission(cost),
        );
        let p = s.parent.max(now) + ep;
        let late = |tat: u64, tolerance: u64| (tat - now).saturating_sub(tolerance);

        let g = t
            .guarantee
            .map(|pace| (g0.max(now) + pace.emission(cost), pace));
        let g_late = g.map(|(g, pace)| late(g, pace.tolerance));
        let c = c0.max(now) + ec;
        let (ef, fair) = match t.pool {
            Some(pool) => {
                let active: u64 = s
                    .children
                    .iter()
                    .filter(|e| *e.name != *name && e.asked + ACTIVE > now)
                    .map(|e| e.weight)
                    .sum::<u64>()
                    + t.weight;
                let ef = fair_emission(cost, pool, active, t.weight);
                (ef, f0.max(now) + ef - now <= pool.tolerance)
            }
            None => (0, false),
        };
        let band = t.bands[usize::from(!fair)];
        let borrow_late = late(c, t.ceiling.tolerance).max(late(p, band));
        let g = g.map_or(g0, |(g, _)| g);
        if g_late == Some(0) && late(p, self.parent.tolerance) == 0 {
            return Plan {
                path: Path::Guaranteed,
                g,
                c,
                f: f0,
                p,
            };
        }
        if cost > 0 && borrow_late <= self.wait {
            // Every TAT it moves, moved as if it came when it goes ahead: a wait the
            // ceiling imposes holds the parent's slot till then too, and the other way.
            let go = now + borrow_late;
            return Plan {
                path: Path::Borrowed {
                    wait: borrow_late,
                    fair,
                },
                g,
                c: c0.max(go) + ec,
                f: if t.pool.is_some() {
                    f0.max(go) + ef
                } else {
                    f0
                },
                p: s.parent.max(go) + ep,
            };
        }
        let borrow = if cost > 0 {
            borrow_late - self.wait
        } else {
            borrow_late
        };
        Plan {
            path: Path::Denied {
                retry: g_late.map_or(borrow, |g| g.min(borrow)),
                fair,
            },
            g,
            c,
            f: f0,
            p,
        }
    }

    /// How `member`'s request of `cost` would be admitted at `now` on `s`, for
    /// `explain`: the path, and the child's active weight share.
    pub fn path(&self, s: &Tree, now: u64, cost: u64, member: &[u8]) -> Option<Path> {
        let (name, t) = self.terms(member)?;
        Some(self.plan(s, now, cost, name, t).path)
    }
}

/// The fair share's emission time for `cost` units: the pool's, scaled by the active
/// weights over the child's. In doubles, as the script computes it (the same IEEE
/// operations in the same order give the same result), rounded up.
pub fn fair_emission(cost: u64, pool: Pace, active: u64, weight: u64) -> u64 {
    let t = (cost as f64 * pool.unit as f64) * active as f64 / (pool.rate as f64 * weight as f64);
    let t = t.ceil();
    if t >= crate::MAX_EXACT as f64 {
        crate::MAX_EXACT
    } else {
        t as u64
    }
}

/// Whole units of `pace` still admitted by `tolerance` at `now` if its TAT were `tat`.
fn slack(now: u64, tolerance: u64, tat: u64, per_unit: u64) -> u64 {
    (now + tolerance).saturating_sub(tat) / per_unit.max(1)
}

impl Meter for Params {
    type State = Tree;

    fn check(&self, s: &Tree, now: u64, cost: u64, member: &[u8]) -> Decision {
        let Some((name, t)) = self.terms(member) else {
            return deny(0, cost, 0, 0, 0);
        };
        if cost > t.burst {
            return deny(t.burst, cost, 0, 0, s.parent.saturating_sub(now));
        }
        let plan = self.plan(s, now, cost, name, t);
        // What the child could still take now: its guarantee's room, or its ceiling's
        // and the parent's at its fair band, whichever is more.
        let after = !matches!(plan.path, Path::Denied { .. });
        let me = s.children.iter().find(|e| *e.name == *name);
        let (g, c, p) = if after {
            (plan.g, plan.c, plan.p)
        } else {
            let (g0, c0) = me.map_or((0, 0), |e| (e.g, e.c));
            (g0.max(now), c0.max(now), s.parent.max(now))
        };
        let guaranteed = t
            .guarantee
            .map_or(0, |pace| slack(now, pace.tolerance, g, pace.emission(1)));
        let borrowable = slack(now, t.ceiling.tolerance, c, t.ceiling.emission(1)).min(slack(
            now,
            t.bands[0],
            p,
            self.parent.emission(1),
        ));
        let remaining = guaranteed.max(borrowable);
        let reset = p - now;
        match plan.path {
            Path::Guaranteed | Path::Borrowed { wait: 0, .. } => allow(t.burst, remaining, reset),
            Path::Borrowed { wait, .. } => waited(t.burst, wait, reset),
            Path::Denied { retry, .. } => deny(t.burst, cost, retry, remaining, reset),
        }
    }

    /// Charges an admitted request on the path `check` chose; a denied one (a mark:
    /// see `marks_denied`) only marks its child active.
    fn commit(&self, s: &mut Tree, now: u64, cost: u64, admitted: bool, member: &[u8]) {
        let Some((name, t)) = self.terms(member) else {
            return;
        };
        let path = admitted.then(|| self.plan(s, now, cost, name, t));
        // Children idle for ACTIVE are the same as none.
        s.children
            .retain(|e| *e.name == *name || e.g.max(e.c).max(e.f) > now || e.asked + ACTIVE > now);
        let i = match s.children.iter().position(|e| *e.name == *name) {
            Some(i) => i,
            None => {
                s.children.push(Entry {
                    name: name.into(),
                    ..Entry::default()
                });
                s.children.len() - 1
            }
        };
        let e = &mut s.children[i];
        e.weight = t.weight;
        match path {
            Some(
                plan @ Plan {
                    path: Path::Guaranteed,
                    ..
                },
            ) => {
                e.g = plan.g;
                e.c = plan.c;
                s.parent = plan.p;
            }
            Some(
                plan @ Plan {
                    path: Path::Borrowed { .. },
                    ..
                },
            ) => {
                e.c = plan.c;
                e.f = plan.f;
                e.asked = now;
                s.parent = plan.p;
            }
            // A denied borrower counts as active.
            _ => e.asked = now,
        }
    }

    /// A denied request marks its child active (its weight joins the fair shares) at
    /// most every [`MARK_EVERY`].
    fn marks_denied(&self, s: &Tree, now: u64, member: &[u8]) -> bool {
        let Some((name, _)) = self.terms(member) else {
            return false;
        };
        s.children
            .iter()
            .find(|e| *e.name == *name)
            .is_none_or(|e| e.asked + MARK_EVERY <= now)
    }

    fn idle_at(&self, s: &Tree) -> u64 {
        s.children.iter().fold(s.parent, |at, e| {
            at.max(e.g).max(e.c).max(e.f).max(e.asked + ACTIVE)
        })
    }
}
