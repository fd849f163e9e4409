//! How a memory store hashes keys: by default the hash each [`Key`] computed once when it
//! was made, or any `BuildHasher` on every check.

use std::hash::{BuildHasher, Hasher};

use super::Inner;
use crate::Key;

impl<H: HashKeys> Inner<H> {
    #[inline]
    pub(super) fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_key(key)
    }
}

/// How a [`MemoryStore`](super::MemoryStore) hashes keys: [`KeyHash`] (the default) or [`Rehash`].
pub trait HashKeys: sealed::Sealed + Send + Sync {
    /// `key`'s hash.
    fn hash_key(&self, key: &Key) -> u64;
    /// The hash of the key whose text (with its group header) is `text`: the same as
    /// `hash_key` gives that key. Used when a table grows.
    fn hash_text(&self, text: &str) -> u64;
}

/// The default: the hash each [`Key`] computed once when it was made, SipHash-1-3
/// under a random key drawn once per process (as std's `HashMap` uses). A hot key is
/// not hashed again on every check.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHash;

/// Hashes a key's text with `H` on every check: see [`MemoryStoreBuilder::hasher`](super::MemoryStoreBuilder::hasher).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rehash<H>(pub(super) H);

impl HashKeys for KeyHash {
    #[inline]
    fn hash_key(&self, key: &Key) -> u64 {
        key.prehash()
    }

    fn hash_text(&self, text: &str) -> u64 {
        crate::key::hash_text(text)
    }
}

impl<H: BuildHasher + Send + Sync> HashKeys for Rehash<H> {
    /// The text's bytes in one write (the keyed hasher's PRF over the exact bytes;
    /// `str`'s `Hash` would add a second write of a terminator, which a table that
    /// compares the key anyway has no use for).
    #[inline]
    fn hash_key(&self, key: &Key) -> u64 {
        self.hash_text(key.text())
    }

    #[inline]
    fn hash_text(&self, text: &str) -> u64 {
        let mut h = self.0.build_hasher();
        h.write(text.as_bytes());
        h.finish()
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::KeyHash {}
    impl<H> Sealed for super::Rehash<H> {}
}
