//! A fixed-size state packed in a word and 21 more bits: how the memory store holds a
//! key's one state inline, and [`State`]'s way in and out of it.

use super::{Inner, State, fixed_window, gcra, token_bucket};
use crate::limit::Kind;

/// A fixed-size state in a word and 21 more bits: how the memory store holds a key's
/// one state inline. A fixed window's start and a token bucket's last refill (times
/// below 2^53 µs, the year 2255) take 53 bits and their count or level (below 2^32)
/// the other 32; a GCRA's TAT takes the word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Packed {
    pub(crate) word: u64,
    /// Below 2^21.
    pub(crate) high: u32,
}

/// Bits of a packed time.
const TIME_BITS: u32 = 53;

impl Packed {
    /// `time` and `count`, when they fit.
    #[inline]
    fn time_and_count(time: u64, count: u64) -> Option<Packed> {
        if time >> TIME_BITS != 0 || count >> 32 != 0 {
            return None;
        }
        let low = 64 - TIME_BITS;
        Some(Packed {
            word: time | (count << TIME_BITS),
            high: (count >> low) as u32,
        })
    }

    #[inline]
    fn time(self) -> u64 {
        self.word & ((1 << TIME_BITS) - 1)
    }

    #[inline]
    fn count(self) -> u64 {
        (self.word >> TIME_BITS) | (u64::from(self.high) << (64 - TIME_BITS))
    }
}

impl State {
    /// This state packed, when it is a fixed-size one whose numbers fit. No state packs
    /// as zeros, which every fixed-size algorithm reads as no state.
    #[inline]
    pub(crate) fn pack(&self) -> Option<Packed> {
        match &self.0 {
            Inner::Empty => Some(Packed::default()),
            Inner::Gcra(tat) => Some(Packed {
                word: tat.0,
                high: 0,
            }),
            // A window with budget alerts reached keeps its mark on the heap.
            Inner::FixedWindow(w) if w.mark != 0 => None,
            Inner::FixedWindow(w) => Packed::time_and_count(w.start, w.count),
            Inner::TokenBucket(b) => Packed::time_and_count(b.last, b.level),
            _ => None,
        }
    }

    /// The state of `kind` that `packed` holds.
    #[inline]
    pub(crate) fn unpack(kind: Kind, packed: Packed) -> State {
        State(match kind {
            Kind::Gcra => Inner::Gcra(gcra::Tat(packed.word)),
            Kind::FixedWindow => Inner::FixedWindow(fixed_window::Window {
                start: packed.time(),
                count: packed.count(),
                mark: 0,
            }),
            Kind::TokenBucket => Inner::TokenBucket(token_bucket::Bucket {
                last: packed.time(),
                level: packed.count(),
            }),
            Kind::Heap => Inner::Empty,
        })
    }
}
