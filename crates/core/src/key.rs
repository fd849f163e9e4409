//! `Key`: the identity a limit is counted for (a user, an API key, an IP, a tenant).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::Error;

/// The longest key accepted, in bytes. Keys come from request data (IPs, API keys,
/// Envoy descriptors); an unbounded key is an unbounded allocation an attacker picks.
pub const MAX_KEY_LEN: usize = 1024;

/// A validated, cheaply cloned identity: non-empty UTF-8, at most [`MAX_KEY_LEN`] bytes.
///
/// ```
/// use spillway_core::Key;
///
/// let key = Key::new("user:42").unwrap();
/// assert_eq!(key.as_str(), "user:42");
/// assert!(Key::new("").is_err());
/// ```
#[derive(Clone, Eq, PartialOrd, Ord)]
pub struct Key(Arc<str>);

impl Key {
    /// Validates `key`.
    pub fn new(key: impl AsRef<str>) -> Result<Key, Error> {
        let key = key.as_ref();
        if key.is_empty() {
            return Err(Error::InvalidKey("key is empty".into()));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(Error::InvalidKey(format!(
                "key is {} bytes, the most is {MAX_KEY_LEN}",
                key.len()
            )));
        }
        Ok(Key(Arc::from(key)))
    }

    /// The key as a string.
    #[inline]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Key {
    /// Pointer equality first: a store compares a request's key with the clone it
    /// stored, and std's `Arc<str>` comparison always compares the bytes.
    #[inline]
    fn eq(&self, other: &Key) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Hash for Key {
    /// Hashes as the `str` it holds, as `Borrow<str>` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
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
        &self.0
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
