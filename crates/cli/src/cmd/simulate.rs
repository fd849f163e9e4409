//! `spillway simulate`: replay a traffic pattern through the chosen algorithms on a
//! manual clock, over the memory store, and report what each admitted against the
//! exact sliding log.

mod chart;
mod distinct;
mod pattern;
mod replay;
mod servers;
mod tables;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use spillway_core::{Algorithm, Edge, Limit, Sharing};
use spillway_policy::duration;

use crate::args;
use replay::Report;

pub const EXAMPLES: &str = "\
Examples:
  # The boundary attack on every algorithm, 100 per minute: fixed windows let 2× through
  spillway simulate --pattern boundary --limit 100 --window 1m

  # Poisson traffic at twice the limit, as JSON, with a chart
  spillway simulate --pattern poisson --rate 3.33 --json --svg poisson.svg

  # Figma's limiter (60 sub-buckets, strict) against the exact log
  spillway simulate --algorithms sliding_log,sliding_window --precision 60 --edge strict

  # How close a distinct limit's count and decisions are to the truth, N from 10 to 1,000,000
  spillway simulate --algorithms distinct

  # Four servers sharing a fixed window by leases of 20, or by sync every 100 ms
  spillway simulate --servers 4 --lease 20 --pattern poisson --limit 1000
  spillway simulate --servers 4 --sync 100ms --pattern bursts --limit 1000 --json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// Evenly spaced requests at --rate.
    Uniform,
    /// Random (exponential) gaps averaging --rate.
    Poisson,
    /// Bursts of --limit requests, each within 1% of the window, averaging --rate.
    Bursts,
    /// --limit requests just before a window edge and --limit just after, every other window.
    Boundary,
    /// A seeded adversary: random bursts aimed at window and sub-bucket edges, trickles and pauses.
    Adversarial,
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Traffic pattern.
    #[arg(long, value_enum, default_value = "boundary")]
    pub pattern: Pattern,

    /// Algorithms to compare: comma-separated names (fixed_window, sliding_log,
    /// sliding_window, token_bucket, gcra) or `all`. Without --edge, `all` runs
    /// sliding_window in each edge mode. `distinct` alone measures distinct limits
    /// instead (see --members).
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub algorithms: Vec<String>,

    /// Requests allowed per window.
    #[arg(long, default_value = "100", allow_negative_numbers = true, value_parser = args::positive)]
    pub limit: u64,

    /// Window length (90s, 1m, 1h, ...).
    #[arg(long, default_value = "1m", value_parser = duration::parse)]
    pub window: Duration,

    /// sliding_window: sub-buckets per window.
    #[arg(long, default_value = "1", allow_negative_numbers = true, value_parser = args::positive_u32)]
    pub precision: u32,

    /// sliding_window: how the partly expired sub-bucket counts (interpolate, strict, lenient).
    #[arg(long)]
    pub edge: Option<String>,

    /// token_bucket and gcra: the most admitted at once (default: --limit).
    #[arg(long, allow_negative_numbers = true, value_parser = args::positive)]
    pub burst: Option<u64>,

    /// Mean requests per second for uniform, poisson, bursts and adversarial
    /// (default: twice the limit).
    #[arg(long, allow_negative_numbers = true)]
    pub rate: Option<f64>,

    /// Simulated time (default: 10 windows).
    #[arg(long, value_parser = duration::parse)]
    pub duration: Option<Duration>,

    /// Seed for the random patterns; the same seed gives the same run.
    #[arg(long, default_value = "1")]
    pub seed: u64,

    /// Servers sharing the limit through one store (arrivals dealt round-robin), for
    /// --lease and --sync.
    #[arg(long, default_value = "1", value_parser = args::positive)]
    pub servers: u64,

    /// Each server takes this many units from the store at once (fixed_window).
    #[arg(long, conflicts_with = "sync", allow_negative_numbers = true, value_parser = args::positive)]
    pub lease: Option<u64>,

    /// Each server counts locally and adds to the store every this long (fixed_window).
    #[arg(long, value_parser = duration::parse)]
    pub sync: Option<Duration>,

    /// distinct: the numbers of distinct members to measure, comma-separated; each row's
    /// limit is its number (default 10,100,1000,10000,100000,1000000).
    #[arg(long, value_delimiter = ',', value_parser = args::positive)]
    pub members: Vec<u64>,

    /// Metered requests: each only looks (cost 0) and, when admitted, is charged a usage
    /// drawn between MIN and MAX (seeded; `N` alone: always N) after the fact, into
    /// debt past the limit. The table then says what was used in any window.
    #[arg(long, value_name = "MIN-MAX", value_parser = usage_range)]
    pub usage: Option<(u64, u64)>,

    /// Print JSON (an array, one object per algorithm) instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Draw admitted requests in the trailing window over time as SVG.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// The same chart as PNG.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
}

pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    if args.algorithms.iter().any(|a| a.trim() == "distinct") {
        return distinct::run(&args);
    }
    if !args.members.is_empty() {
        bail!("--members applies to --algorithms distinct");
    }
    let sharing = match (args.lease, args.sync) {
        (Some(units), _) => Sharing::Lease { units },
        (None, Some(every)) => Sharing::Sync { every },
        (None, None) => Sharing::Exact,
    };
    let shared = sharing.is_shared() || args.servers > 1;
    if shared && args.usage.is_some() {
        bail!("--usage simulates one server: leave out --servers, --lease and --sync");
    }
    if shared && (args.svg.is_some() || args.png.is_some()) {
        bail!("--svg and --png chart one server; leave them out with --servers, --lease or --sync");
    }
    let limits = limits(&args, shared)?;
    for limit in &limits {
        sharing
            .check(limit)
            .map_err(|e| anyhow::anyhow!("{}: {e}", limit.algorithm().name()))?;
        if let Some((_, high)) = args.usage
            && high > limit.max_usage()
        {
            bail!(
                "--usage up to {high} is more than {} can be charged at once ({})",
                limit.algorithm().name(),
                limit.max_usage()
            );
        }
    }
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

    if shared {
        let progress = progress_bar(arrivals.len() as u64 * limits.len() as u64);
        let runs: Vec<servers::Shared> = limits
            .iter()
            .map(|l| {
                servers::replay(l, sharing, args.servers as usize, &arrivals, || {
                    progress.inc(1)
                })
            })
            .collect();
        progress.finish_and_clear();
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&runs).context("encoding the report")?
            );
        } else {
            println!(
                "{:?} pattern, limit {} per {}, {} requests over {}, {} servers (seed {})",
                args.pattern,
                args.limit,
                duration::format(limits[0].window()),
                arrivals.len(),
                duration::format(Duration::from_micros(duration)),
                args.servers,
                args.seed,
            );
            println!("{}", tables::shared(&runs));
            println!("{}", sharing.bound());
        }
        return Ok(ExitCode::SUCCESS);
    }

    // The exact sliding log is the yardstick, whether or not it was asked for.
    let log_limit = Limit::new(Algorithm::SlidingLog, args.limit, limits[0].window())?;
    let progress = progress_bar(arrivals.len() as u64 * (limits.len() as u64 + 1));
    // One usage per arrival, the same for every algorithm.
    let usages: Option<Vec<u64>> = args.usage.map(|(low, high)| {
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(args.seed);
        (0..arrivals.len())
            .map(|_| rand::Rng::random_range(&mut rng, low..=high))
            .collect()
    });
    let usages = usages.as_deref();
    let log = replay::replay(&log_limit, &arrivals, usages, || progress.inc(1));
    let mut reports: Vec<Report> = limits
        .iter()
        .map(|limit| {
            let mut report = replay::replay(limit, &arrivals, usages, || progress.inc(1));
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
        match args.usage {
            Some((low, high)) => {
                println!("each admitted request then used {low}–{high} units, charged after it");
                println!("{}", tables::usage(&reports));
            }
            None => println!("{}", tables::decisions(&mut reports)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The limits to compare, validated (a bad window or precision is reported here).
/// Shared between servers, `all` means the algorithms that can be shared: fixed_window.
fn limits(args: &SimulateArgs, shared: bool) -> anyhow::Result<Vec<Limit>> {
    if shared && args.algorithms == ["all"] {
        return Ok(vec![crate::limit::build(
            Algorithm::FixedWindow,
            args.limit,
            args.window,
            crate::limit::Shape::default(),
        )?]);
    }
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
        .map(|a| {
            // One run compares several algorithms: each takes the flags it has a use for.
            let shape = crate::limit::Shape {
                burst: args.burst.filter(|_| crate::limit::has_burst(&a)),
                ..Default::default()
            };
            crate::limit::build(a, args.limit, args.window, shape)
        })
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

/// `--usage`: `MIN-MAX` or `N`, each from 1 to 2^32.
fn usage_range(s: &str) -> Result<(u64, u64), String> {
    let (low, high) = s.split_once('-').unwrap_or((s, s));
    let bound = |v: &str| match args::positive(v.trim())? {
        n if n <= 1 << 32 => Ok(n),
        n => Err(format!("must be at most 2^32, got {n}")),
    };
    let (low, high) = (bound(low)?, bound(high)?);
    if low > high {
        return Err(format!("MIN {low} is above MAX {high}"));
    }
    Ok((low, high))
}
