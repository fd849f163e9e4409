//! Value parsers the subcommands' arguments share: numbers with clear errors, and any
//! type that parses from its name (`--on-store-error`, `--headers`).

use std::str::FromStr;

pub fn positive(s: &str) -> Result<u64, String> {
    match s.parse::<i128>() {
        Ok(n) if n >= 1 && n <= i128::from(u64::MAX) => Ok(n as u64),
        Ok(n) => Err(format!("must be a positive whole number, got {n}")),
        Err(_) => Err(format!("must be a positive whole number, got `{s}`")),
    }
}

pub fn cost(s: &str) -> Result<u64, String> {
    match s.parse::<i128>() {
        Ok(n) if n >= 0 && n <= i128::from(spillway_core::MAX_EXACT) => Ok(n as u64),
        Ok(n) => Err(format!("must be a whole number from 0 to 2^53, got {n}")),
        Err(_) => Err(format!("must be a whole number from 0 to 2^53, got `{s}`")),
    }
}

pub fn positive_u32(s: &str) -> Result<u32, String> {
    let n = positive(s)?;
    u32::try_from(n).map_err(|_| format!("must be at most {}, got {n}", u32::MAX))
}

/// Any type named by a string: its own `FromStr` says what is wrong.
pub fn named<T: FromStr<Err = String>>(s: &str) -> Result<T, String> {
    s.parse()
}
