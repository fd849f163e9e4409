//! Durations on the command line: `90s`, `100ms`, `1m`, `1h30m`, `1d`.

use std::time::Duration;

/// Parses a human duration (`humantime` syntax); a bare number is refused because its
/// unit would be a guess.
pub fn parse(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration like 1s, 250ms, 1m, 1h ({e})"))
}

/// Formats a duration compactly for tables (`1m`, `250ms`).
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
