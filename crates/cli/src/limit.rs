//! Limits from command-line flags, one way for every subcommand.

use std::time::Duration;

use spillway_core::{Algorithm, Limit};

/// A limit of `n` per `window`; `burst` applies to token_bucket and gcra only (the
/// others have none, and simulate passes one flag for all algorithms).
pub fn build(
    algorithm: Algorithm,
    n: u64,
    window: Duration,
    burst: Option<u64>,
    count_rejected: bool,
) -> anyhow::Result<Limit> {
    let mut b = Limit::builder(algorithm, n, window).count_rejected(count_rejected);
    if let (Some(burst), Algorithm::TokenBucket | Algorithm::Gcra) = (burst, algorithm) {
        b = b.burst(burst);
    }
    Ok(b.build()?)
}
