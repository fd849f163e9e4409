//! `spillway simulate`: replay a traffic pattern through the chosen algorithms on a
//! manual clock, over the memory store, and report what each admitted against the
//! exact sliding log.

use std::process::ExitCode;

use anyhow::{Context, bail};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use indicatif::{ProgressBar, ProgressStyle};
use spillway_core::{Algorithm, Edge, Limit};

use crate::cli::SimulateArgs;
use crate::duration;
use crate::simulate::{self, Report, chart, pattern};

pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let limits = limits(&args)?;
    let window = limits[0].window_micros();
    let duration = args
        .duration
        .map_or(window.saturating_mul(10), |d| d.as_micros() as u64);
    if duration == 0 {
        bail!("--duration must be longer than 0");
    }
    let rate = args
        .rate
        .unwrap_or(2.0 * args.limit as f64 / (window as f64 / 1e6));
    if !(rate.is_finite() && rate > 0.0) {
        bail!("--rate must be a positive number of requests per second, got {rate}");
    }
    let shape = pattern::Shape {
        limit: args.limit,
        window,
        duration,
        rate,
        seed: args.seed,
    };
    let arrivals = pattern::arrivals(args.pattern, shape).map_err(anyhow::Error::msg)?;

    // The exact sliding log is the yardstick, whether or not it was asked for.
    let log_limit = Limit::new(Algorithm::SlidingLog, args.limit, limits[0].window())?;
    let progress = progress_bar(arrivals.len() as u64 * (limits.len() as u64 + 1));
    let log = simulate::replay(&log_limit, &arrivals, || progress.inc(1));
    let mut reports: Vec<Report> = limits
        .iter()
        .map(|limit| {
            let mut report = simulate::replay(limit, &arrivals, || progress.inc(1));
            report.compare_with(&log);
            report
        })
        .collect();
    progress.finish_and_clear();

    let title = format!(
        "{:?} pattern, limit {} per {}, {} requests over {}",
        args.pattern,
        args.limit,
        duration::format(limits[0].window()),
        arrivals.len(),
        duration::format(std::time::Duration::from_micros(duration)),
    )
    .to_lowercase();
    let frame = chart::Frame {
        title: &title,
        limit: args.limit,
        window,
        duration,
    };
    if let Some(path) = &args.svg {
        chart::svg(path, &reports, &frame)?;
    }
    if let Some(path) = &args.png {
        chart::png(path, &reports, &frame)?;
    }

    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reports).context("encoding the report")?
        );
    } else {
        println!("{title} (seed {})", args.seed);
        println!("{}", table(&mut reports));
    }
    Ok(ExitCode::SUCCESS)
}

/// The limits to compare, validated (a bad window or precision is reported here).
fn limits(args: &SimulateArgs) -> anyhow::Result<Vec<Limit>> {
    let edge: Option<Edge> = args.edge.as_deref().map(str::parse).transpose()?;
    let mut algorithms: Vec<Algorithm> = Vec::new();
    for name in &args.algorithms {
        let name = name.trim();
        let expanded: Vec<Algorithm> = if name == "all" {
            Algorithm::ALL.to_vec()
        } else {
            vec![name.parse()?]
        };
        for algorithm in expanded {
            // Only sliding_window has edges; `all` shows each of them unless --edge picks one.
            let edges = match (algorithm, edge) {
                (Algorithm::SlidingWindow { .. }, Some(e)) => vec![e],
                (Algorithm::SlidingWindow { .. }, None) if name == "all" => {
                    vec![Edge::Interpolate, Edge::Strict, Edge::Lenient]
                }
                _ => vec![Edge::Interpolate],
            };
            for e in edges {
                let a = match algorithm {
                    Algorithm::SlidingWindow { .. } => Algorithm::SlidingWindow {
                        precision: args.precision,
                        edge: e,
                    },
                    other => other,
                };
                if !algorithms.contains(&a) {
                    algorithms.push(a);
                }
            }
        }
    }
    if algorithms.is_empty() {
        bail!("--algorithms is empty");
    }
    algorithms
        .into_iter()
        .map(|a| crate::limit::build(a, args.limit, args.window, args.burst, false))
        .collect()
}

fn progress_bar(total: u64) -> ProgressBar {
    // Only worth drawing for long runs; indicatif draws nothing when stderr is not a terminal.
    if total < 2_000_000 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} simulating [{bar:40}] {percent}% {per_sec} eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

fn table(reports: &mut [Report]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header([
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
