//! How a limit's answer is used: its [`Mode`] (enforce, or only observe) and its
//! [`OnStoreError`] failure policy. Defined once here for the service's policies, the
//! tower layer and the [`GuardedStore`](crate::store::GuardedStore) that applies them.

/// Whether a limit's denial denies the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Deny when over the limit.
    #[default]
    Enforce,
    /// Decide, count and report, but never deny: to try a limit on real traffic before
    /// enforcing it. A shadow limit never changes an answer, not even when the store
    /// fails (it then lets through, whatever its failure policy).
    Shadow,
}

impl Mode {
    /// The name as written in configuration: `enforce` or `shadow`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }
}

/// What a limit does when its store fails, times out, or its circuit breaker is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnStoreError {
    /// Admit the request, unlimited.
    Open,
    /// Refuse to decide: HTTP 503, gRPC `UNAVAILABLE`, never reported as over the
    /// limit. Behind Envoy, its `failure_mode_deny` then decides, as with the reference.
    Closed,
    /// Decide with an in-process store holding the same limits (per instance, so `n`
    /// instances admit up to `n` times the limit while the store is down).
    Local,
}

impl OnStoreError {
    /// Every policy, in the order of their names' documentation.
    pub const ALL: [OnStoreError; 3] = [
        OnStoreError::Open,
        OnStoreError::Closed,
        OnStoreError::Local,
    ];

    /// The name as written in configuration: `open`, `closed` or `local`.
    pub fn name(self) -> &'static str {
        match self {
            OnStoreError::Open => "open",
            OnStoreError::Closed => "closed",
            OnStoreError::Local => "local",
        }
    }
}

impl std::str::FromStr for OnStoreError {
    type Err = String;

    /// Parses `open`, `closed` or `local`.
    fn from_str(s: &str) -> Result<OnStoreError, String> {
        OnStoreError::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown on_store_error `{s}` (expected open, closed or local)"))
    }
}

impl std::fmt::Display for OnStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
