//! `Key`: the identity a limit is counted for (a user, an API key, an IP, a tenant), and
//! the group it is stored with.

use arcstr::ArcStr;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::LazyLock;

use crate::Error;

/// The longest key accepted, in bytes. Keys come from request data (IPs, API keys,
/// Envoy descriptors); an unbounded key is an unbounded allocation an attacker picks.
pub const MAX_KEY_LEN: usize = 1024;

/// A validated, cheaply cloned identity: non-empty UTF-8, at most [`MAX_KEY_LEN`] bytes.
///
/// A key belongs to a *group*: the keys a store keeps together so that one atomic
/// decision can cover them (on Redis Cluster, the hash tag, so one slot). A key made
/// with [`Key::new`] is a group of its own; [`Key::grouped`] puts several keys (one
/// descriptor's limits, say) in one group. Two keys are equal when their text and
/// their group are.
///
/// ```
/// use spillway_core::Key;
///
/// let key = Key::new("user:42").unwrap();
/// assert_eq!((key.as_str(), key.group()), ("user:42", "user:42"));
/// assert!(Key::new("").is_err());
///
/// let burst = Key::grouped("api|key=k1", "#burst").unwrap();
/// assert_eq!((burst.group(), burst.member()), ("api|key=k1", "#burst"));
/// assert_ne!(burst, Key::new("api|key=k1#burst").unwrap());
/// ```
#[derive(Clone, Eq)]
pub struct Key {
    /// Two ASCII digits in base 64 (`'0'` + n) giving the group's length in bytes (0:
    /// the whole key), then the key. In the text rather than a field of its own, and
    /// an `ArcStr` (its length lives with the text), so that a memory-store entry holds
    /// a key's text in one pointer.
    text: ArcStr,
    /// [`hash_text`] of `text`, computed once: a store that looks a key up many times
    /// (or in several places) does not hash it again.
    hash: u64,
}

/// Bytes of the group-length header in front of the key's text.
const HEADER: usize = 2;

impl Key {
    /// Validates `key`; the key is a group of its own.
    pub fn new(key: impl AsRef<str>) -> Result<Key, Error> {
        let key = key.as_ref();
        check_len(key.len())?;
        Ok(Key::with_header(0, key, ""))
    }

    /// The key whose text is `parts` one after the other (`Key::new` of their
    /// concatenation), built in one allocation.
    pub fn joined(parts: &[&str]) -> Result<Key, Error> {
        let len = parts.iter().map(|p| p.len()).sum();
        check_len(len)?;
        let text = ArcStr::init_with(HEADER + len, |buf| write_joined(buf, parts))
            .expect("ASCII digits then strs are UTF-8");
        Ok(Key {
            hash: hash_text(&text),
            text,
        })
    }

    /// The key `member` of `group`: stored together with the group's other keys.
    /// An empty member is the group's own key, the same as `Key::new(group)`.
    pub fn grouped(group: &str, member: &str) -> Result<Key, Error> {
        if member.is_empty() {
            return Key::new(group);
        }
        if group.is_empty() {
            return Err(Error::InvalidKey("key group is empty".into()));
        }
        check_len(group.len() + member.len())?;
        Ok(Key::with_header(group.len(), group, member))
    }

    /// `group_len` ≤ [`MAX_KEY_LEN`] < 64², checked by the callers.
    fn with_header(group_len: usize, group: &str, member: &str) -> Key {
        let header = [b'0' + (group_len / 64) as u8, b'0' + (group_len % 64) as u8];
        let parts = [&header[..], group.as_bytes(), member.as_bytes()];
        let text = ArcStr::init_with(HEADER + group.len() + member.len(), |buf| {
            let mut at = 0;
            for part in parts {
                buf[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
        })
        .expect("ASCII digits then two strs are UTF-8");
        Key {
            hash: hash_text(&text),
            text,
        }
    }

    /// The key as a string: the group, then the member.
    #[inline]
    pub fn as_str(&self) -> &str {
        &self.text[HEADER..]
    }

    /// The group the key is stored with.
    #[inline]
    pub fn group(&self) -> &str {
        &self.as_str()[..self.group_len()]
    }

    /// What follows the group: empty for a key that is a group of its own.
    #[inline]
    pub fn member(&self) -> &str {
        &self.as_str()[self.group_len()..]
    }

    /// The key's text with its group header: what a store keeps to compare keys.
    #[inline]
    pub(crate) fn text(&self) -> &ArcStr {
        &self.text
    }

    /// The key's hash, computed once when it was made ([`hash_text`]).
    #[inline]
    pub(crate) fn prehash(&self) -> u64 {
        self.hash
    }

    /// Whether `text` (a [`text`](Key::text)) is this key's.
    #[inline]
    pub(crate) fn is(&self, text: &ArcStr) -> bool {
        ArcStr::ptr_eq(&self.text, text) || self.text.as_str() == text.as_str()
    }

    /// Bytes of text the key keeps on the heap (its header included).
    pub(crate) fn text_bytes(&self) -> usize {
        self.text.len()
    }

    fn group_len(&self) -> usize {
        let b = self.text.as_bytes();
        match usize::from(b[0] - b'0') * 64 + usize::from(b[1] - b'0') {
            0 => self.text.len() - HEADER,
            n => n,
        }
    }
}

/// The text `Key::joined(parts)` would hold (its header included), written into `buf`:
/// `None` when it does not fit or is not a valid key's (empty, or over
/// [`MAX_KEY_LEN`]), for the caller to build the key as usual.
pub(crate) fn join_on<'b>(buf: &'b mut [u8], parts: &[&str]) -> Option<&'b str> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len == 0 || len > MAX_KEY_LEN || HEADER + len > buf.len() {
        return None;
    }
    let text = &mut buf[..HEADER + len];
    write_joined(text, parts);
    Some(std::str::from_utf8(text).expect("ASCII digits then strs are UTF-8"))
}

/// A joined key's text into `buf`, exactly its length: the header of a key without a
/// group, then `parts`.
fn write_joined(buf: &mut [u8], parts: &[&str]) {
    buf[..HEADER].copy_from_slice(b"00");
    let mut at = HEADER;
    for part in parts {
        buf[at..at + part.len()].copy_from_slice(part.as_bytes());
        at += part.len();
    }
}

/// The process's keyed hash of a key's text (with its header): SipHash-1-3 under a
/// random key drawn once per process, as std's `HashMap` uses. Keys come from clients;
/// without the secret key an attacker cannot choose keys that collide.
pub(crate) fn hash_text(text: &str) -> u64 {
    static SEED: LazyLock<RandomState> = LazyLock::new(RandomState::new);
    let mut h = SEED.build_hasher();
    h.write(text.as_bytes());
    h.finish()
}

fn check_len(len: usize) -> Result<(), Error> {
    if len == 0 {
        return Err(Error::InvalidKey("key is empty".into()));
    }
    if len > MAX_KEY_LEN {
        return Err(Error::InvalidKey(format!(
            "key is {len} bytes, the most is {MAX_KEY_LEN}"
        )));
    }
    Ok(())
}

impl PartialEq for Key {
    /// Pointer equality first: a store compares a request's key with the clone it
    /// stored.
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        // The header makes the group part of the comparison.
        ArcStr::ptr_eq(&self.text, &other.text)
            || (self.hash == other.hash && self.text.as_str() == other.text.as_str())
    }
}

impl Hash for Key {
    /// Writes the key's keyed hash (`hash_text`'s, computed once when the key was
    /// made): equal keys have equal text, so equal hashes. Keys come from clients; a
    /// table of keys under any hasher (hashbrown's fast one included) is then as
    /// collision-resistant as the keyed hash, without hashing the text again.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl TryFrom<&str> for Key {
    type Error = Error;
    fn try_from(key: &str) -> Result<Key, Error> {
        Key::new(key)
    }
}

impl TryFrom<String> for Key {
    type Error = Error;
    fn try_from(key: String) -> Result<Key, Error> {
        Key::new(key)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Ord for Key {
    /// By text, then by group (a key's text sorts as it reads).
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.as_str()
            .cmp(other.as_str())
            .then_with(|| self.text.cmp(&other.text))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what a key writes into a hasher.
    #[derive(Default)]
    struct Recorder(Vec<u8>);

    impl Hasher for Recorder {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.extend_from_slice(bytes);
        }
    }

    #[test]
    fn a_table_hashes_a_key_by_its_keyed_hash_never_its_text() {
        // Whatever hasher a table uses (the deny cache's and quota tables' hashbrown
        // default is not keyed), it sees only the keyed hash: a client that chooses
        // keys cannot choose their buckets.
        let key = Key::new("user_attacker-chosen").unwrap();
        let mut seen = Recorder::default();
        key.hash(&mut seen);
        assert_eq!(seen.0, hash_text(key.text()).to_ne_bytes());
        assert!(!seen.0.windows(8).any(|w| w == b"attacker"));
    }

    #[test]
    fn a_joined_key_is_the_key_of_its_parts_together() {
        for parts in [&["per-key", ":", "user-1"][..], &["x"], &["", "ab", ""]] {
            let joined = Key::joined(parts).unwrap();
            let whole = Key::new(parts.concat()).unwrap();
            assert_eq!(joined, whole);
            assert_eq!(joined.as_str(), whole.as_str());
            assert_eq!(joined.hash, whole.hash);
        }
        assert!(Key::joined(&["", ""]).is_err());
        let half = "k".repeat(MAX_KEY_LEN / 2 + 1);
        assert!(Key::joined(&[&half, &half]).is_err());
    }

    #[test]
    fn rejects_empty_and_oversize_keys_and_says_why() {
        assert!(Key::new("").unwrap_err().to_string().contains("empty"));
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert!(
            Key::new(&long)
                .unwrap_err()
                .to_string()
                .contains("1025 bytes")
        );
        assert!(Key::new("k".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn a_group_is_part_of_the_key() {
        let a = Key::grouped("ab", "c").unwrap();
        let b = Key::grouped("a", "bc").unwrap();
        let whole = Key::new("abc").unwrap();
        assert_eq!(a.as_str(), b.as_str());
        assert_ne!(a, b);
        assert_ne!(a, whole);
        assert_eq!(Key::grouped("abc", "").unwrap(), whole);
        assert_eq!(whole.member(), "");
        assert!(Key::grouped("", "x").is_err());
        let long = "k".repeat(MAX_KEY_LEN);
        assert!(
            Key::grouped(&long, "x")
                .unwrap_err()
                .to_string()
                .contains("1025 bytes")
        );
    }
}
