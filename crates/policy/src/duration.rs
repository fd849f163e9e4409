//! Durations as people write them — `90s`, `250ms`, `1m`, `1h30m`, `1d` — read one way
//! everywhere: a policy's `window`, the service's settings and the command line.

use std::time::Duration;

/// Parses a human duration (`humantime` syntax); a bare number is refused because its
/// unit would be a guess.
pub fn parse(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration like 1s, 250ms, 1m ({e})"))
}

/// Formats a duration compactly for tables and messages (`1m`, `250ms`).
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_units_and_refuses_bare_numbers() {
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse("10").unwrap_err().contains("is not a duration like"));
        assert_eq!(format(Duration::from_secs(60)), "1m");
    }
}
