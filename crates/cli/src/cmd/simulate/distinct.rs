//! `spillway simulate --algorithms distinct`: how far a `distinct` limit is from the
//! truth for N distinct members, on the memory store (whose sketches are Redis's,
//! register for register, so the figures hold on Redis too).
//!
//! Per N, two runs on a manual clock that never moves (one window):
//!
//! - **Count**: N new members against a limit too high to reach (counted in sketches):
//!   the estimated count against N.
//! - **At the limit** (a limit of N, exact or sketched as N decides): N new members,
//!   then N more, then the first N again. The truth is the set of members admitted: a
//!   new member should be admitted while fewer than N are, a repeat always. A *false
//!   deny* is a member that should have been admitted and was not; a *false admit* a
//!   new member admitted once N were.

use std::process::ExitCode;

use anyhow::{Context, bail};
use serde::Serialize;
use spillway_core::algorithm::distinct;
use spillway_core::{Algorithm, Key, Limit, MemoryStore, Request};
use spillway_policy::duration;

use super::SimulateArgs;
use super::replay::START;

/// One N's figures.
#[derive(Debug, Serialize)]
pub struct Row {
    pub members: u64,
    /// The count a sketch gives for the N members.
    pub estimated: u64,
    /// `(estimated − N) / N`, in percent.
    pub error_percent: f64,
    /// How a limit of N counts: `exact` or `sketch`.
    pub mode: &'static str,
    /// Distinct members admitted at a limit of N (of 2N offered).
    pub admitted: u64,
    /// Requests that should have been admitted (N new under the limit, N repeats).
    pub should_admit: u64,
    pub false_denies: u64,
    /// New members past the limit, which should have been denied.
    pub should_deny: u64,
    pub false_admits: u64,
    /// Peak bytes of the key at the limit in the memory store (entry, key and state).
    pub bytes_per_key: usize,
}

/// The members of one run: distinct, of the length of an IPv4 address.
fn member(seed: u64, run: u64, i: u64) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&(seed ^ run.rotate_left(32)).to_le_bytes());
    m[8..].copy_from_slice(&i.to_le_bytes());
    m
}

/// The figures for `n` members, sub-windows `precision` of `window`; `tick` after
/// every decision.
pub fn measure(
    n: u64,
    precision: u32,
    window: std::time::Duration,
    seed: u64,
    mut tick: impl FnMut(),
) -> anyhow::Result<Row> {
    let algorithm = Algorithm::Distinct { precision };
    let key = Key::new("sender").expect("valid key");
    let decide = |store: &MemoryStore, limit: &Limit, m: &[u8], cost: u64| {
        store
            .decide_one(Request::new(&key, limit, cost).with_member(m), START)
            .expect("a member of 16 bytes, cost 0 or 1, is valid")
    };

    // The count: a limit no run reaches.
    let unreached = Limit::new(algorithm, distinct::MAX_LIMIT, window)?;
    let store = MemoryStore::new();
    for i in 0..n {
        decide(&store, &unreached, &member(seed, 0, i), 1);
        tick();
    }
    let peek = decide(&store, &unreached, &member(seed, 0, 0), 0);
    let estimated = distinct::MAX_LIMIT - peek.remaining;

    // At the limit.
    let limit = Limit::new(algorithm, n, window)?;
    let store = MemoryStore::new();
    let (mut admitted, mut false_denies, mut false_admits, mut should_deny) = (0, 0, 0, 0);
    let mut first_admitted = Vec::new();
    for i in 0..2 * n {
        let m = member(seed, 1, i);
        let ok = decide(&store, &limit, &m, 1).allowed();
        if admitted < n {
            false_denies += u64::from(!ok);
        } else {
            should_deny += 1;
            false_admits += u64::from(ok);
        }
        if ok {
            admitted += 1;
            if i < n {
                first_admitted.push(i);
            }
        }
        tick();
    }
    let should_admit_new = 2 * n - should_deny;
    for &i in &first_admitted {
        false_denies += u64::from(!decide(&store, &limit, &member(seed, 1, i), 1).allowed());
        tick();
    }
    Ok(Row {
        members: n,
        estimated,
        error_percent: (estimated as f64 - n as f64) / n as f64 * 100.0,
        admitted,
        mode: if distinct::is_exact(n) {
            "exact"
        } else {
            "sketch"
        },
        should_admit: should_admit_new + first_admitted.len() as u64,
        false_denies,
        should_deny,
        false_admits,
        bytes_per_key: store.footprint(&key).unwrap_or(0),
    })
}

/// Decisions `measure` takes for `n` (for the progress bar).
pub fn decisions(n: u64) -> u64 {
    4 * n
}

/// `--algorithms distinct`: the count and the decisions against the truth, per N.
pub fn run(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    if args.algorithms.len() > 1 {
        bail!("distinct counts members, not requests: simulate it alone (`--algorithms distinct`)");
    }
    if args.servers > 1 || args.lease.is_some() || args.sync.is_some() {
        bail!("--servers, --lease and --sync apply to fixed_window, not distinct");
    }
    if args.svg.is_some() || args.png.is_some() || args.edge.is_some() || args.burst.is_some() {
        bail!("--svg, --png, --edge and --burst do not apply to distinct");
    }
    let members = if args.members.is_empty() {
        vec![10, 100, 1_000, 10_000, 100_000, 1_000_000]
    } else {
        args.members.clone()
    };
    let progress = super::progress_bar(members.iter().map(|&n| decisions(n)).sum());
    let rows = members
        .iter()
        .map(|&n| {
            measure(n, args.precision, args.window, args.seed, || {
                progress.inc(1)
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    progress.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).context("encoding the report")?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "distinct, precision {} per {}: each row's limit is its number of members (seed {})",
        args.precision,
        duration::format(args.window),
        args.seed
    );
    let mut table = super::tables::titled([
        "members N",
        "estimated",
        "error",
        "limit N counts",
        "admitted of 2N",
        "false denies",
        "false admits",
        "bytes/key",
    ]);
    let rate = |k: u64, of: u64| {
        format!(
            "{k} of {of} ({:.2}%)",
            if of == 0 {
                0.0
            } else {
                k as f64 / of as f64 * 100.0
            }
        )
    };
    for r in &rows {
        table.add_row([
            r.members.to_string(),
            r.estimated.to_string(),
            format!("{:+.2}%", r.error_percent),
            r.mode.to_string(),
            r.admitted.to_string(),
            rate(r.false_denies, r.should_admit),
            rate(r.false_admits, r.should_deny),
            r.bytes_per_key.to_string(),
        ]);
    }
    println!("{table}");
    println!(
        "false denies: of N new members under the limit and N repeats; false admits: of N \
         new members past it"
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn exact_limits_are_exact_and_sketches_are_close() {
        let hour = Duration::from_secs(3600);
        let exact = measure(100, 1, hour, 1, || {}).unwrap();
        assert_eq!(exact.mode, "exact");
        assert_eq!((exact.false_denies, exact.false_admits), (0, 0));
        assert_eq!((exact.should_admit, exact.should_deny), (200, 100));
        let sketch = measure(5_000, 1, hour, 1, || {}).unwrap();
        assert_eq!(sketch.mode, "sketch");
        assert!(sketch.error_percent.abs() < 3.0, "{sketch:?}");
        // The sketch's membership error: some new members past the limit look counted.
        assert!(sketch.false_admits > 0, "{sketch:?}");
        assert!(sketch.false_admits < sketch.should_deny / 2, "{sketch:?}");
    }
}
