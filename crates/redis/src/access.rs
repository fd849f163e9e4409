//! How a store proves who it is to Redis and checks who Redis is: TLS, and the
//! credentials that override the URL's (a password read from a file is in neither
//! argv nor the environment). A [`Password`] prints as `***` everywhere.

use std::path::Path;

use redis::RedisConnectionInfo;

use crate::Error;
use crate::tls::TlsOptions;

/// TLS and credentials for a store, beside its URL. Credentials given here win over
/// the URL's; the sentinel ones are for the sentinels of a `redis+sentinel://` URL
/// (the URL's are for the master).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Access {
    /// TLS, for `rediss` URLs.
    pub tls: TlsOptions,
    /// The ACL user (Redis 6+).
    pub username: Option<String>,
    /// The password (of `username`, or of the `default` user).
    pub password: Option<Password>,
    /// The sentinels' ACL user.
    pub sentinel_username: Option<String>,
    /// The sentinels' password (the reference service's `REDIS_SENTINEL_AUTH`).
    pub sentinel_password: Option<Password>,
}

/// A secret: readable by the store, printed as `***` by `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Access {
    /// `info` with this access's master credentials over its own.
    pub(crate) fn apply(&self, info: RedisConnectionInfo) -> RedisConnectionInfo {
        login(info, self.username.as_deref(), self.password.as_ref())
    }

    /// `info` with this access's sentinel credentials over its own.
    pub(crate) fn apply_sentinel(&self, info: RedisConnectionInfo) -> RedisConnectionInfo {
        login(
            info,
            self.sentinel_username.as_deref(),
            self.sentinel_password.as_ref(),
        )
    }
}

fn login(
    mut info: RedisConnectionInfo,
    username: Option<&str>,
    password: Option<&Password>,
) -> RedisConnectionInfo {
    if let Some(u) = username {
        info = info.set_username(u);
    }
    if let Some(p) = password {
        info = info.set_password(&p.0);
    }
    info
}

// === impl Password ===

impl Password {
    /// A password given as text.
    pub fn new(secret: impl Into<String>) -> Password {
        Password(secret.into())
    }

    /// The first line of a file (a mounted secret), without its line ending. An empty
    /// or unreadable file is an error naming the file, never the content.
    pub fn from_file(path: &Path) -> Result<Password, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::InvalidSetting(format!("cannot read secret file `{}`: {e}", path.display()))
        })?;
        let line = text.lines().next().unwrap_or("");
        if line.is_empty() {
            return Err(Error::InvalidSetting(format!(
                "secret file `{}` is empty",
                path.display()
            )));
        }
        Ok(Password(line.to_owned()))
    }

    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_prints() {
        let access = Access {
            password: Some(Password::new("hunter2")),
            sentinel_password: Some(Password::new("hunter3")),
            ..Access::default()
        };
        let shown = format!("{access:?} {}", access.password.as_ref().unwrap());
        assert!(!shown.contains("hunter"), "{shown}");
        let info = access.apply(RedisConnectionInfo::default());
        assert_eq!(info.password(), Some("hunter2"));
        assert!(!format!("{info:?}").contains("hunter"));
    }

    #[test]
    fn a_password_file_gives_its_first_line() {
        let dir = std::env::temp_dir().join(format!("spillway-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("password");
        std::fs::write(&file, "s3cret\r\n").unwrap();
        // `lines` strips "\n" and "\r\n".
        assert_eq!(Password::from_file(&file).unwrap().expose(), "s3cret");
        std::fs::write(&file, "\n").unwrap();
        let e = Password::from_file(&file).unwrap_err().to_string();
        assert!(e.contains("is empty"), "{e}");
        let e = Password::from_file(&dir.join("nope"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot read secret file") && e.contains("nope"),
            "{e}"
        );
    }
}
