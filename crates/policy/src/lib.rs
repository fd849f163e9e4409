//! Spillway's policies: which limits a request is checked against.
//!
//! Two formats in one schema. Files of the Envoy reference rate limit service
//! (envoyproxy/ratelimit) load unchanged and behave as the reference does: fixed windows
//! aligned to the epoch, hits counted even when over the limit. Spillway's superset adds,
//! per descriptor, `limits` (several, of any algorithm, checked all or nothing),
//! `mode: enforce | shadow` and `on_store_error: open | closed | local`.
//!
//! ```yaml
//! domain: api
//! descriptors:
//!   - key: remote_address          # the reference's format
//!     rate_limit: { unit: second, requests_per_unit: 10 }
//!   - key: api_key                 # Spillway's
//!     on_store_error: local
//!     limits:
//!       - { name: burst, algorithm: gcra, limit: 10, window: 1s, burst: 20 }
//!       - { name: daily, algorithm: sliding_window, precision: 60, limit: 10000, unit: day }
//! ```
//!
//! Files are read in two stages: `raw` serde structs that mirror the file (unknown keys
//! refused), then a checked [`PolicySet`]; every mistake names its file, line and field.
//!
//! ```
//! let domain = spillway_policy::parse("api.yaml", "
//! domain: api
//! descriptors:
//!   - key: user
//!     rate_limit: { unit: minute, requests_per_unit: 100 }
//! ").unwrap();
//! let m = domain.resolve(&[("user", "42")]).unwrap();
//! assert_eq!(m.rules[0].requests_per_unit, 100);
//! assert!(domain.resolve(&[("user", "42"), ("path", "/")]).is_none()); // deeper: no match
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod duration;
mod error;
mod load;
pub mod overrides;
mod raw;
mod rule;
mod set;
mod unit;
mod validate;

pub use error::{Error, Errors};
pub use load::{LoadOptions, assemble, assemble_with, is_policy_file, load, load_with, parse};
pub use rule::{Counters, Handle, InUse, Metadata, Priorities, Rule, RuleLimit};
pub use set::{
    Domain, How, MAX_VALUE_KEPT, Match, PolicySet, Step, Trace, Unmatched, digested, escape_into,
    member_of, override_key, value_into, wildcard_match,
};
pub use spillway_core::{Mode, OnStoreError};
pub use unit::Unit;
