//! Tests that read values from the process-wide metrics recorder (the `metrics` facade has
//! one recorder per process, so every server of a test binary shares it). They are kept
//! apart from the other server tests, whose requests would move these counts, and here
//! take turns ([`turn`]), reading each count as the difference their own requests made.

#[path = "../it/support.rs"]
mod support;

mod deny_cache;
mod drain;
mod metrics;
mod per_second;

/// The process-wide recorder is this binary's one shared thing: its tests run one at a time.
pub async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// The value of the series `series` (name and labels, as rendered) in `/metrics` text; 0
/// when the series has not been registered yet.
pub fn value(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The sum of every series whose line starts with `prefix` (a name and some of its labels).
pub fn sum(text: &str, prefix: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
