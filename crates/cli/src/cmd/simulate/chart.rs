//! The `--svg` / `--png` chart: admitted requests in the trailing window over time,
//! one line per algorithm, with the limit as a dashed line.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::replay::{Report, trailing_count};

/// Points sampled along the time axis.
const SAMPLES: u64 = 1000;

/// Fonts tried in order; `SPILLWAY_FONT` names another TTF/OTF file.
const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

const COLORS: [RGBColor; 8] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// What the chart shows besides the reports.
pub struct Frame<'a> {
    pub title: &'a str,
    pub limit: u64,
    pub window: u64,
    pub duration: u64,
}

pub fn svg(path: &Path, reports: &[Report], frame: &Frame<'_>) -> anyhow::Result<()> {
    load_font()?;
    let root = SVGBackend::new(path, (1200, 700)).into_drawing_area();
    plot(root, reports, frame).with_context(|| format!("drawing {}", path.display()))
}

pub fn png(path: &Path, reports: &[Report], frame: &Frame<'_>) -> anyhow::Result<()> {
    load_font()?;
    let root = BitMapBackend::new(path, (1200, 700)).into_drawing_area();
    plot(root, reports, frame).with_context(|| format!("drawing {}", path.display()))
}

/// Registers a system font once: plotters' own font loading needs fontconfig headers
/// a fresh machine lacks, so the chart reads a TTF file itself.
fn load_font() -> anyhow::Result<()> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let candidates: Vec<String> = std::env::var("SPILLWAY_FONT")
                .into_iter()
                .chain(FONTS.iter().map(|s| s.to_string()))
                .collect();
            let bytes = candidates
                .iter()
                .find_map(|p| std::fs::read(p).ok())
                .ok_or_else(|| {
                    format!(
                        "no font for the chart: install fonts-dejavu-core or set SPILLWAY_FONT to a .ttf file (tried {})",
                        candidates.join(", ")
                    )
                })?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| "the chart font is not a valid TTF/OTF file".to_string())
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

fn plot<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    reports: &[Report],
    f: &Frame<'_>,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let top = reports
        .iter()
        .map(|r| r.max_in_window)
        .max()
        .unwrap_or(0)
        .max(f.limit);
    let seconds = f.duration as f64 / 1e6;
    let mut chart = ChartBuilder::on(&root)
        .caption(f.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..seconds, 0.0..(top as f64 * 1.15))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("admitted in the trailing window")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;

    let step = (f.duration / SAMPLES).max(1);
    for (i, report) in reports.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = (0..=f.duration).step_by(step as usize).map(|t| {
            (
                t as f64 / 1e6,
                trailing_count(&report.admitted_at, t, f.window) as f64,
            )
        });
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(format!("{} (max {})", report.label, report.max_in_window))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    let limit = f.limit as f64;
    chart
        .draw_series(DashedLineSeries::new(
            vec![(0.0, limit), (seconds, limit)],
            8,
            6,
            BLACK.stroke_width(1),
        ))
        .map_err(err)?
        .label(format!("limit {}", f.limit))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
