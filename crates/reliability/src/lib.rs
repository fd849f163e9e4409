//! Spillway under faults, load and hostile input, against real processes: the suite
//! behind `docs/reliability.md`. The fast part runs in the test suite
//! (`tests/`); the whole matrix runs from the `spillway-reliability` binary:
//!
//! ```text
//! cargo run --release -p spillway-reliability -- faults
//! cargo run --release -p spillway-reliability -- rlqs
//! cargo run --release -p spillway-reliability -- overload
//! cargo run --release -p spillway-reliability -- skew
//! cargo run --release -p spillway-reliability -- hostile
//! cargo run --release -p spillway-reliability -- soak
//! ```
//!
//! The fuzz targets are in `fuzz/` (`scripts/fuzz`).

#![forbid(unsafe_code)]

pub mod cluster;
pub mod fault;
pub mod hostile;
pub mod load;
pub mod overload;
pub mod rlqs;
pub mod skew;
pub mod soak;
pub mod trial;

pub use fault::Fault;
pub use trial::{Policy, Report, TABLE_HEADER, Timing};

/// Every binary this crate is part of (its tests and `spillway-reliability`) counts what it
/// allocates, so a case can read the heap it leaves behind exactly: resident memory also
/// holds what the allocator keeps after a free, and moves by tens of MiB with its arenas.
#[global_allocator]
static HEAP: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Bytes allocated and not yet freed in this process (the service runs in it).
pub(crate) fn heap_bytes() -> i64 {
    let stats = HEAP.stats();
    stats.bytes_allocated as i64 - stats.bytes_deallocated as i64
}

/// This process's resident memory in KiB (the service runs in it), from /proc.
pub(crate) fn rss_kib() -> u64 {
    proc_status("VmRSS")
        .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time the machine lost to other guests of its host so far (the `steal` column
/// of /proc/stat's `cpu` line, every CPU together), in ms; 0 where it is not kept.
pub(crate) fn stolen_ms() -> u64 {
    const TICKS_PER_SEC: u64 = 100;
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .and_then(|fields| fields.split_whitespace().nth(7)?.parse::<u64>().ok())
        .map_or(0, |ticks| ticks * 1000 / TICKS_PER_SEC)
}

/// File descriptors this process has open, from /proc.
pub(crate) fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// One field of this process's `/proc/self/status` (`VmRSS`, `Uid`, …), trimmed.
pub(crate) fn proc_status(field: &str) -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| {
        let value = l.strip_prefix(field)?.strip_prefix(':')?;
        Some(value.trim().to_string())
    })
}
