//! [`Shape`]: what a limit's stored state belongs to, computed once when the limit is
//! built (a store compares it on every check), and numbered in this process so that a
//! memory-store entry can name it in 11 bits.

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock, RwLockReadGuard};

use crate::algorithm::{Algorithm, Params, State, distinct};

/// The identity of a limit's stored state: algorithm, window, and (for `sliding_window`)
/// precision or (for `token_bucket`) rate and burst, (for `distinct`) precision and, for
/// a sketched one, its limit. Two limits of one shape on one key share their state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// This shape's number in the process (1 ..= [`MAX_ID`]), or 0 when the numbers
    /// ran out. Equal shapes have equal numbers.
    id: u16,
    tag: u8,
    precision: u32,
    window: u64,
    /// `[limit, burst]` for `token_bucket`, `[1, limit]` for a sketched `distinct`, else
    /// zeros.
    capacity: [u64; 2],
}

/// The most shapes numbered in one process (11 bits). Limits of further shapes work
/// the same; the memory store keeps their states out of line.
pub(crate) const MAX_ID: u16 = (1 << 11) - 1;

/// Which algorithm a shape's state is (the tags `Shape::of` gives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    FixedWindow,
    TokenBucket,
    Gcra,
    /// An algorithm whose state does not fit in a word (logs, buckets, sketches).
    Heap,
}

impl Shape {
    /// The shape of a limit of these parameters, whose algorithm computes with `params`
    /// (computed once, when it is built: a store compares it on every check).
    pub(super) fn of(
        algorithm: Algorithm,
        limit: u64,
        window: u64,
        burst: u64,
        params: &Params,
    ) -> Shape {
        let (tag, precision, capacity) = match algorithm {
            // A calendar's periods are other windows than the epoch's, and than another
            // calendar's: `[its code, 0]`.
            Algorithm::FixedWindow => match params.calendar() {
                Some(c) => (0, 0, [c.code(), 0]),
                None => (0, 0, [0, 0]),
            },
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
            // Holds lapse at times of their own: a changed limit or lease keeps them.
            Algorithm::Concurrency => (6, 0, [0, 0]),
            // A tree keeps its children by name: a changed tree keeps what it holds.
            Algorithm::Shares => (7, 0, [0, 0]),
        };
        let shape = Shape {
            id: 0,
            tag,
            precision,
            window: if algorithm.holds() { 0 } else { window },
            capacity,
        };
        Shape {
            id: number(shape, params),
            ..shape
        }
    }

    /// This shape's number in the process; 0 when the numbers ran out.
    #[inline]
    pub(crate) fn id(&self) -> u16 {
        self.id
    }

    /// Which algorithm's state the shape holds.
    #[inline]
    pub(crate) fn kind(&self) -> Kind {
        match self.tag {
            0 => Kind::FixedWindow,
            3 => Kind::TokenBucket,
            4 => Kind::Gcra,
            _ => Kind::Heap,
        }
    }
}

/// Every shape numbered in this process, with the parameters of the first limit of
/// each: a state's expiry depends only on its shape (see `Limit::shape`), so a store can
/// sweep states it holds by number.
#[derive(Default)]
struct Registry {
    ids: HashMap<Shape, u16>,
    /// Index `id - 1`.
    shapes: Vec<(Shape, Params)>,
}

static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(RwLock::default);

/// `shape`'s number (its `id` is 0 here), given it now if it is new.
fn number(shape: Shape, params: &Params) -> u16 {
    if let Some(&id) = read().ids.get(&shape) {
        return id;
    }
    let mut registry = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    if let Some(&id) = registry.ids.get(&shape) {
        return id;
    }
    let Ok(id) = u16::try_from(registry.shapes.len() + 1) else {
        return 0;
    };
    if id > MAX_ID {
        return 0;
    }
    registry
        .shapes
        .push((Shape { id, ..shape }, params.clone()));
    registry.ids.insert(shape, id);
    id
}

fn read() -> RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

/// The numbered shapes, read-locked: for a store that looks up many at once.
pub(crate) struct Shapes(RwLockReadGuard<'static, Registry>);

impl Shapes {
    pub(crate) fn read() -> Shapes {
        Shapes(read())
    }

    /// The shape numbered `id` (not 0).
    pub(crate) fn shape(&self, id: u16) -> Shape {
        self.0.shapes[usize::from(id) - 1].0
    }

    /// When `state`, of the shape numbered `id`, becomes the same as no state (µs).
    pub(crate) fn idle_at(&self, id: u16, state: &State) -> u64 {
        self.0.shapes[usize::from(id) - 1].1.idle_at(state)
    }
}
