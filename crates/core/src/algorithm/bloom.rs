//! A Bloom filter per sketched `distinct` sub-window: whether a member was counted. A
//! HyperLogLog counts well but cannot tell a new member from a counted one (a new
//! member that raises no register looks counted, and past a few thousand members most
//! do not raise one), so a sketched limit asks this filter instead: a counted member is
//! always found (no false denies), a new one is mistaken for a counted one about 0.8%
//! of the time at the limit (10 bits and 7 hashes per member the limit allows).
//!
//! The bit positions come from two MurmurHash64A hashes of the member (double hashing),
//! computed here for both stores: the Redis store sends them to the script with the
//! member, which reads and sets the same bits in a string key (`BITFIELD`).

use super::hll::murmur64a;

/// Bits per member the limit allows: with [`HASHES`], a false positive rate of 0.82%
/// when the filter holds `limit` members.
pub const BITS_PER_MEMBER: u64 = 10;
/// Bits tested and set per member.
pub const HASHES: usize = 7;
const SEEDS: (u64, u64) = (0x5bd1_e995_9747_b28c, 0x2f69_3a1c_85eb_ca6b);

/// The filter's size in bits for a limit of `limit` members, in whole 64-bit words.
pub fn bits(limit: u64) -> u64 {
    (limit.saturating_mul(BITS_PER_MEMBER)).next_multiple_of(64)
}

/// The bits `member` tests and sets in a filter of `bits` bits.
pub fn positions(member: &[u8], bits: u64) -> [u32; HASHES] {
    let h1 = murmur64a(member, SEEDS.0);
    let h2 = murmur64a(member, SEEDS.1) | 1;
    let mut out = [0u32; HASHES];
    for (i, p) in out.iter_mut().enumerate() {
        *p = (h1.wrapping_add((i as u64).wrapping_mul(h2)) % bits) as u32;
    }
    out
}

/// One filter: empty (no allocation) until a member is added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bloom(Box<[u64]>);

impl Bloom {
    /// Whether every bit of `positions` is set.
    pub fn contains(&self, positions: &[u32; HASHES]) -> bool {
        !self.0.is_empty()
            && positions
                .iter()
                .all(|&p| self.0[p as usize / 64] & (1 << (p % 64)) != 0)
    }

    /// Sets the bits of `positions` in a filter of `bits` bits.
    pub fn insert(&mut self, positions: &[u32; HASHES], bits: u64) {
        if self.0.is_empty() {
            self.0 = vec![0; (bits / 64) as usize].into_boxed_slice();
        }
        for &p in positions {
            self.0[p as usize / 64] |= 1 << (p % 64);
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.0.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_added_are_found_and_new_ones_rarely_are() {
        let limit = 10_000;
        let (bits, mut bloom) = (bits(limit), Bloom::default());
        assert!(!bloom.contains(&positions(b"x", bits)));
        for i in 0..limit {
            bloom.insert(&positions(&i.to_le_bytes(), bits), bits);
        }
        assert!((0..limit).all(|i| bloom.contains(&positions(&i.to_le_bytes(), bits))));
        let false_positives = (limit..limit * 11)
            .filter(|i| bloom.contains(&positions(&i.to_le_bytes(), bits)))
            .count();
        // 0.82% expected of 100,000.
        assert!((500..1200).contains(&false_positives), "{false_positives}");
        assert_eq!(bloom.heap_bytes() as u64, bits / 8);
    }
}
