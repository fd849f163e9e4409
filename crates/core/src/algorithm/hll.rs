//! HyperLogLog registers exactly as Redis keeps them (`PFADD`, `PFCOUNT`, `PFMERGE`):
//! the same hash (MurmurHash64A, seed `0xadc83b19`), the same 2^14 registers of ranks
//! up to 51, the same estimator (Ertl's, which Redis uses since 5.0). The same members
//! give the same registers and the same count in the memory store as in Redis, so a
//! `distinct` limit decides the same on both (`crates/redis/tests/it/hll.rs` compares
//! registers byte for byte and counts against a real server).
//!
//! The registers are sparse (sorted `(index, rank)` pairs) while few are set, and a
//! dense byte per register past [`SPARSE_MAX`] pairs.

/// Registers: 2^14, as Redis (`HLL_P`).
pub const REGISTERS: usize = 1 << P;
const P: u32 = 14;
/// Hash bits left for the rank (`HLL_Q`).
const Q: u32 = 64 - P;
/// Sparse pairs kept before going dense: 3 bytes each, so at most 3 KB sparse, as
/// Redis's default `hll-sparse-max-bytes` (3000).
pub const SPARSE_MAX: usize = 1000;
const SEED: u64 = 0xadc8_3b19;
/// `0.5 / ln 2`, Redis's `HLL_ALPHA_INF`.
#[allow(clippy::excessive_precision)]
const ALPHA_INF: f64 = 0.721_347_520_444_481_703_680;

/// Redis's MurmurHash64A (little-endian reads, as Redis's endian-neutral version).
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let mut k = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate() {
            h ^= u64::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register a member sets and the rank it sets it to (Redis's `hllPatLen`): the
/// low 14 bits of the hash choose the register, and the rank is 1 + the number of
/// zero bits above them before the first one (at most 51).
pub fn pattern(member: &[u8]) -> (u16, u8) {
    let hash = murmur64a(member, SEED);
    let index = (hash & ((1 << P) - 1)) as u16;
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// One HyperLogLog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registers(Repr);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Repr {
    /// Set registers, by index.
    Sparse(Vec<(u16, u8)>),
    Dense(Box<Dense>),
}

/// A byte per register, and how many registers hold each value: the histogram the
/// estimator reads, kept as registers change so a count is O(64), not O(2^14).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dense {
    registers: [u8; REGISTERS],
    histogram: Histogram,
}

/// How many registers hold each value 0..=51 (and room to 63).
type Histogram = [u32; 64];

impl Dense {
    fn new() -> Box<Dense> {
        let mut histogram = [0; 64];
        histogram[0] = REGISTERS as u32;
        Box::new(Dense {
            registers: [0; REGISTERS],
            histogram,
        })
    }

    fn set(&mut self, index: u16, rank: u8) -> bool {
        let r = &mut self.registers[usize::from(index)];
        if rank <= *r {
            return false;
        }
        self.histogram[usize::from(*r)] -= 1;
        self.histogram[usize::from(rank)] += 1;
        *r = rank;
        true
    }
}

impl Default for Registers {
    fn default() -> Self {
        Registers(Repr::Sparse(Vec::new()))
    }
}

impl Registers {
    /// Adds `member`; true when a register changed (Redis's `PFADD` reply), so the
    /// count may have.
    pub fn add(&mut self, member: &[u8]) -> bool {
        let (index, rank) = pattern(member);
        self.set(index, rank)
    }

    /// Raises register `index` to `rank`; true when it changed.
    fn set(&mut self, index: u16, rank: u8) -> bool {
        match &mut self.0 {
            Repr::Dense(dense) => dense.set(index, rank),
            Repr::Sparse(pairs) => match pairs.binary_search_by_key(&index, |p| p.0) {
                Ok(i) => {
                    let changed = rank > pairs[i].1;
                    pairs[i].1 = pairs[i].1.max(rank);
                    changed
                }
                Err(i) => {
                    if pairs.len() < SPARSE_MAX {
                        pairs.insert(i, (index, rank));
                    } else {
                        let mut dense = Dense::new();
                        for &(j, r) in pairs.iter() {
                            dense.set(j, r);
                        }
                        dense.set(index, rank);
                        self.0 = Repr::Dense(dense);
                    }
                    true
                }
            },
        }
    }

    /// Raises every register to `other`'s where that is higher (`PFMERGE`).
    pub fn merge(&mut self, other: &Registers) {
        match &other.0 {
            Repr::Sparse(pairs) => {
                for &(index, rank) in pairs {
                    self.set(index, rank);
                }
            }
            Repr::Dense(dense) => {
                for (index, &rank) in dense.registers.iter().enumerate() {
                    if rank > 0 {
                        self.set(index as u16, rank);
                    }
                }
            }
        }
    }

    /// The register values, one byte each (for comparing with Redis's).
    pub fn values(&self) -> Vec<u8> {
        match &self.0 {
            Repr::Dense(dense) => dense.registers.to_vec(),
            Repr::Sparse(pairs) => {
                let mut values = vec![0u8; REGISTERS];
                for &(index, rank) in pairs {
                    values[usize::from(index)] = rank;
                }
                values
            }
        }
    }

    /// Whether no member was added.
    pub fn is_empty(&self) -> bool {
        matches!(&self.0, Repr::Sparse(pairs) if pairs.is_empty())
    }

    /// The estimated number of distinct members (Redis's `PFCOUNT`).
    pub fn count(&self) -> u64 {
        estimate(&self.histogram())
    }

    fn histogram(&self) -> Histogram {
        match &self.0 {
            Repr::Dense(dense) => dense.histogram,
            Repr::Sparse(pairs) => {
                let mut histogram = [0; 64];
                histogram[0] = (REGISTERS - pairs.len()) as u32;
                for &(_, r) in pairs {
                    histogram[usize::from(r)] += 1;
                }
                histogram
            }
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Sparse(pairs) => pairs.capacity() * std::mem::size_of::<(u16, u8)>(),
            Repr::Dense(_) => std::mem::size_of::<Dense>(),
        }
    }
}

/// Redis's `hllCount` from the histogram of register values, operation for operation
/// (the same doubles, rounded half away from zero as `llroundl`).
fn estimate(histogram: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let q = Q as usize;
    let mut z = m * tau((m - f64::from(histogram[q + 1])) / m);
    for &h in histogram[1..=q].iter().rev() {
        z += f64::from(h);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if previous == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if previous == z {
            return z / 3.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_counts_zero_and_small_sets_count_exactly() {
        let mut h = Registers::default();
        assert_eq!(h.count(), 0);
        for i in 0..100u32 {
            h.add(format!("10.0.0.{i}").as_bytes());
        }
        // Without two members in one register (likely at 100 of 16384), exact.
        let set = h.values().iter().filter(|r| **r > 0).count() as u64;
        assert_eq!(h.count(), set);
    }

    #[test]
    fn adding_again_changes_nothing() {
        let mut h = Registers::default();
        assert!(h.add(b"a"));
        assert!(!h.add(b"a"));
        assert_eq!(h.count(), 1);
    }

    #[test]
    fn dense_and_sparse_agree() {
        let mut sparse = Registers::default();
        let mut members = Vec::new();
        for i in 0..5000u32 {
            members.push(i.to_le_bytes());
        }
        for m in &members[..SPARSE_MAX / 2] {
            sparse.add(m);
        }
        let mut dense = Registers(Repr::Dense(Dense::new()));
        for m in &members[..SPARSE_MAX / 2] {
            dense.add(m);
        }
        assert_eq!(sparse.count(), dense.count());
        assert_eq!(sparse.values(), dense.values());
        assert_eq!(sparse.histogram(), dense.histogram());
        for m in &members {
            sparse.add(m);
        }
        assert!(matches!(sparse.0, Repr::Dense(_)), "went dense");
        // The kept histogram is the registers'.
        let Repr::Dense(d) = &sparse.0 else {
            unreachable!()
        };
        let mut recount = [0u32; 64];
        d.registers
            .iter()
            .for_each(|r| recount[usize::from(*r)] += 1);
        assert_eq!(d.histogram, recount);
        let error = (sparse.count() as f64 - 5000.0).abs() / 5000.0;
        assert!(error < 0.03, "{}", sparse.count());
    }

    #[test]
    fn merge_is_the_union() {
        let (mut a, mut b, mut both) = (
            Registers::default(),
            Registers::default(),
            Registers::default(),
        );
        for i in 0..3000u32 {
            let m = i.to_le_bytes();
            if i % 2 == 0 {
                a.add(&m);
            } else {
                b.add(&m);
            }
            both.add(&m);
        }
        a.merge(&b);
        assert_eq!(a.values(), both.values());
        assert_eq!(a.count(), both.count());
    }
}
