//! `spillway simulate`'s tables: one run per algorithm, servers sharing a limit, and
//! metered requests (`--usage`).

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use super::replay::Report;
use super::servers;

/// A table in `simulate`'s style, with this header.
pub fn titled(header: impl Into<comfy_table::Row>) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    table
}

/// Servers sharing a limit by lease or sync: what each admitted against the exact count.
pub fn shared(runs: &[servers::Shared]) -> Table {
    let mut table = titled([
        "algorithm",
        "sharing",
        "admitted",
        "exact",
        "over (window)",
        "bound",
        "under (window)",
        "bound",
        "store calls",
    ]);
    for r in runs {
        table.add_row([
            r.algorithm.to_string(),
            r.sharing.clone(),
            r.admitted.to_string(),
            r.exact_admitted.to_string(),
            r.over_admitted.to_string(),
            format!("≤ {}", r.bound_over),
            r.under_admitted.to_string(),
            format!("≤ {}", r.bound_under),
            format!("{} of {}", r.store_calls, r.requests),
        ]);
    }
    table
}

/// `--usage`'s table: looks admitted, what they used, the most in any window (the
/// debt one window ran into) and over the run.
pub fn usage(reports: &[Report]) -> Table {
    let mut table = titled([
        "algorithm",
        "admitted",
        "rejected",
        "used",
        "most used in any window",
        "÷ limit",
        "over the run ÷ limit",
        "over vs log",
        "under vs log",
    ]);
    for r in reports {
        let Some(u) = &r.usage else { continue };
        table.add_row([
            r.label.clone(),
            r.admitted.to_string(),
            r.rejected.to_string(),
            u.used.to_string(),
            format!("{} / {}", u.max_used_in_window, r.limit),
            format!("{:.2}", u.max_ratio),
            format!("{:.2}", u.long_run_ratio),
            r.over_admitted_vs_log.to_string(),
            r.under_admitted_vs_log.to_string(),
        ]);
    }
    table
}

/// One run per algorithm: what each admitted, against its promise and the exact log.
pub fn decisions(reports: &mut [Report]) -> Table {
    let mut table = titled([
        "algorithm",
        "admitted",
        "rejected",
        "max in any window",
        "÷ limit",
        "promised",
        "over vs log",
        "under vs log",
        "bytes/key",
    ]);
    for r in reports.iter() {
        table.add_row([
            r.label.clone(),
            r.admitted.to_string(),
            r.rejected.to_string(),
            format!("{} / {}", r.max_in_window, r.limit),
            format!("{:.2}", r.max_ratio),
            r.bound.map_or("≈".to_string(), |b| format!("≤ {b}")),
            r.over_admitted_vs_log.to_string(),
            r.under_admitted_vs_log.to_string(),
            r.bytes_per_key.to_string(),
        ]);
    }
    table
}
