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

use super::meter::{Meter, allow, deny, waited};
use crate::decision::Decision;

mod spec;

pub(crate) use spec::validate;
pub use spec::{Inner, Pace, Params, Share, Shares, Terms, level, member};

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
    /// Where `member`'s request of `cost` stands at `now` on `s`, for `explain`: its
    /// path (and wait), and the units its child's guarantee, its borrowing (its
    /// ceiling and the parent at its fair band) and the parent have left now.
    pub fn place(&self, s: &Tree, now: u64, cost: u64, member: &[u8]) -> Option<Place> {
        let (name, t) = self.terms(member)?;
        let path = self.plan(s, now, cost, name, t).path;
        let me = s.children.iter().find(|e| *e.name == *name);
        let (g0, c0) = me.map_or((0, 0), |e| (e.g, e.c));
        let parent = s.parent.max(now);
        let guaranteed = t.guarantee.map_or(0, |pace| {
            slack(now, pace.tolerance, g0.max(now), pace.emission(1))
        });
        let per_unit = self.parent.emission(1);
        let borrowable = slack(now, t.ceiling.tolerance, c0.max(now), t.ceiling.emission(1))
            .min(slack(now, t.bands[0], parent, per_unit));
        Some(Place {
            path,
            guaranteed,
            borrowable,
            parent: slack(now, self.parent.tolerance, parent, per_unit),
        })
    }
}

/// Where a request stands in a `shares` tree ([`Params::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// How it would be admitted, or why not.
    pub path: Path,
    /// Units its child's guarantee has left now.
    pub guaranteed: u64,
    /// Units it could borrow now: its ceiling's and the parent's at its fair band.
    pub borrowable: u64,
    /// Units the parent has left now, every band together.
    pub parent: u64,
}

impl Tree {
    /// The state the Redis script keeps (shares.lua's layout: the parent's TAT, then
    /// per child its weight, TATs `g`, `c`, `f`, when it last asked, all doubles, its
    /// name's length, 4 bytes, and its name), decoded; `None` for bytes of another
    /// layout.
    pub fn from_script(v: &[u8]) -> Option<Tree> {
        let f64_at = |p: usize| -> Option<u64> {
            let b: [u8; 8] = v.get(p..p + 8)?.try_into().ok()?;
            Some(f64::from_le_bytes(b) as u64)
        };
        let mut tree = Tree {
            parent: f64_at(0)?,
            children: Vec::new(),
        };
        let mut p = 8;
        while p < v.len() {
            let len: [u8; 4] = v.get(p + 40..p + 44)?.try_into().ok()?;
            let len = u32::from_le_bytes(len) as usize;
            tree.children.push(Entry {
                weight: f64_at(p)?,
                g: f64_at(p + 8)?,
                c: f64_at(p + 16)?,
                f: f64_at(p + 24)?,
                asked: f64_at(p + 32)?,
                name: v.get(p + 44..p + 44 + len)?.into(),
            });
            p += 44 + len;
        }
        Some(tree)
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
            Path::Guaranteed => allow(t.burst, remaining, reset),
            Path::Borrowed { wait, .. } => Decision {
                borrowed: true,
                queued: false,
                ..if wait == 0 {
                    allow(t.burst, remaining, reset)
                } else {
                    waited(t.burst, wait, reset)
                }
            },
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
