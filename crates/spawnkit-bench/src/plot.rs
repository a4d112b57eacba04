//! Charts a person can read, as SVG and PNG: latency bars per row and parent size, CPU bars
//! per row and mode, throughput curves, fence bars (time to the child running, and the
//! fence's cost). Text uses DejaVu Sans, embedded (no system fonts).

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::latency::SIZES;
use super::Results;

const FONT: &str = "sans-serif";
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn register_font() -> Result<(), String> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "the embedded DejaVu Sans font did not load".to_string());
    });
    result
}

/// Labels on a log axis only at 1, 2 and 5 × 10^k (the others stay light grid lines).
fn log_label(v: &f64) -> String {
    let exp = v.log10().floor();
    let lead = v / 10f64.powf(exp);
    if [1.0, 2.0, 5.0].iter().any(|d| (lead - d).abs() < 1e-6) {
        if *v >= 1.0 {
            format!("{v:.0}")
        } else {
            format!("{v}")
        }
    } else {
        String::new()
    }
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("{e:?}")
}

/// One bar: its value and an optional marker (the median).
type Bar = Option<(f64, Option<f64>)>;

/// Horizontal grouped bars: one band per row, one bar per group (parent size, mode), a log
/// x axis. `values[row][group]` = (bar, optional marker such as the median).
struct Bars<'a> {
    title: &'a str,
    x_label: &'a str,
    groups: Vec<String>,
    rows: Vec<(String, Vec<Bar>)>,
    /// The legend in the upper right corner (where the top rows' bars are short) instead of a
    /// third of the way down.
    legend_top: bool,
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, b: &Bars<'_>) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let all = b
        .rows
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .flat_map(|(v, m)| std::iter::once(*v).chain(*m));
    let (lo, hi) = all.fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= 0.0 {
        return Err("nothing to plot".into());
    }
    let (lo, hi) = ((lo / 2.0).max(1e-3), hi * 3.0);
    let n = b.rows.len();
    let name_width = 250;
    let mut chart = ChartBuilder::on(root)
        .caption(b.title, (FONT, 20))
        .margin(15)
        .margin_left(name_width)
        .x_label_area_size(45)
        .y_label_area_size(5)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..n as f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(b.x_label)
        .x_labels(30)
        .x_label_formatter(&log_label)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(err)?;
    let k = b.groups.len().max(1) as f64;
    let band = 0.8 / k;
    for (i, (name, values)) in b.rows.iter().enumerate() {
        let top = (n - 1 - i) as f64;
        let (px, py) = chart.backend_coord(&(lo, top + 0.5));
        root.draw(&Text::new(
            name.clone(),
            (px - 8, py),
            TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(err)?;
        for (j, v) in values.iter().enumerate() {
            let Some((v, marker)) = *v else { continue };
            let y1 = top + 0.9 - j as f64 * band;
            let y0 = y1 - band * 0.92;
            let color = COLORS[j % COLORS.len()];
            chart
                .draw_series([Rectangle::new([(lo, y0), (v, y1)], color.filled())])
                .map_err(err)?;
            if let Some(m) = marker {
                chart
                    .draw_series([PathElement::new(vec![(m, y0), (m, y1)], BLACK.stroke_width(2))])
                    .map_err(err)?;
            }
            let label = if v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") };
            let (lx, ly) = chart.backend_coord(&(v.max(marker.unwrap_or(0.0)), (y0 + y1) / 2.0));
            root.draw(&Text::new(
                label,
                (lx + 4, ly),
                TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
        }
    }
    for (j, g) in b.groups.iter().enumerate() {
        let color = COLORS[j % COLORS.len()];
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(err)?
            .label(g.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    // The legend sits at the right, a third of the way down: the longest bars (fork from a
    // large parent) are at the top and bottom rows. Or at the top, when asked.
    let (w, h) = chart.plotting_area().dim_in_pixel();
    let at = if b.legend_top {
        SeriesLabelPosition::UpperRight
    } else {
        SeriesLabelPosition::Coordinate(w as i32 - 200, h as i32 / 3)
    };
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

fn draw_throughput<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    res: &Results,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let totals = &res.config.totals;
    let k = totals.len();
    let y_hi = res
        .throughput
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.mean + p.stddev))
        .fold(0f64, f64::max)
        * 1.6;
    let title = format!(
        "Throughput: processes per second, at most {} alive (mean ± stddev; higher is better)",
        res.config.active
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..k as f64 - 0.5, 0f64..y_hi.max(1.0))
        .map_err(err)?;
    // One tick per total (evenly spaced: the totals grow roughly geometrically).
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_desc("processes started (total)")
        .y_desc("processes per second")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()
        .map_err(err)?;
    for (i, t) in totals.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64, 0.0));
        root.draw(&Text::new(
            t.to_string(),
            (px, py + 6),
            TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(err)?;
    }
    for (i, row) in res.throughput.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> =
            row.points.iter().enumerate().map(|(j, p)| (j as f64, p.mean)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(row.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, color.filled())))
            .map_err(err)?;
        for (j, p) in row.points.iter().enumerate() {
            let x = j as f64;
            chart
                .draw_series([PathElement::new(
                    vec![(x, (p.mean - p.stddev).max(0.0)), (x, p.mean + p.stddev)],
                    color.stroke_width(1),
                )])
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

fn latency_bars(res: &Results) -> Bars<'static> {
    let groups = SIZES.iter().map(|s| s.label().to_string()).collect();
    let rows = res
        .latency
        .iter()
        .filter(|r| r.skipped.is_none())
        .map(|r| {
            let v = SIZES
                .iter()
                .map(|s| r.sizes.get(s).map(|st| (st.min_us, Some(st.median_us))))
                .collect();
            (r.name.clone(), v)
        })
        .collect();
    Bars {
        title: "Spawn latency: minimum (bar) and median (line), µs, log scale; lower is better",
        x_label: "µs from spawn to the child running (log scale)",
        groups,
        rows,
        legend_top: false,
    }
}

fn cpu_bars(res: &Results) -> Bars<'static> {
    let rows = res
        .cpu
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                vec![
                    r.plain.map(|c| (c.total_us(), None)),
                    r.captured.map(|c| (c.total_us(), None)),
                ],
            )
        })
        .collect();
    Bars {
        title: "CPU per spawn (user + system, parent and child), µs, log scale; lower is better",
        x_label: "µs of CPU per spawn (log scale)",
        groups: vec!["stdout to /dev/null".into(), "stdout captured (pipe)".into()],
        rows,
        legend_top: false,
    }
}

fn fence_bars(res: &Results) -> Bars<'static> {
    let rows = super::fence::ALL
        .iter()
        .filter_map(|f| res.fence.iter().find(|r| r.fence == *f && r.stats.is_some()))
        .map(|r| {
            let run = r.stats.map(|s| (s.min_us, Some(s.median_us)));
            // A cost at or below zero (noise on a base-sized difference) has no bar on a log axis.
            let cost = r.cost(&res.fence).filter(|c| c.0 > 0.0).map(|c| (c.0, Some(c.1.max(c.0))));
            (r.fence.name().to_string(), vec![run, cost])
        })
        .collect();
    Bars {
        title:
            "Fence (private /tmp + network + user ns): minimum (bar), median (line), µs, log scale",
        x_label: "µs (log scale); lower is better",
        groups: vec![
            "spawn → the child running".into(),
            "fence cost (− same launcher, no fence)".into(),
        ],
        rows,
        legend_top: true,
    }
}

fn ps_bars(res: &Results) -> Bars<'static> {
    let rows = res
        .ps
        .iter()
        .flat_map(|p| p.rows.iter())
        .filter(|r| r.skipped.is_none())
        .map(|r| {
            let name = super::ps::short_name(&r.id).to_string();
            (name, vec![r.min_ms().map(|m| (m, r.median_ms()))])
        })
        .collect();
    Bars {
        title: "Process table and memory: minimum (bar), median (line), ms, log scale",
        x_label: "ms (log scale); lower is better",
        groups: vec![format!("{} sleeping processes", res.ps.as_ref().map_or(0, |p| p.herd))],
        rows,
        legend_top: false,
    }
}

/// Write every chart the run has data for; returns the files written.
pub fn write_all(res: &Results, dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = Vec::new();
    let mut bars = Vec::new();
    if !res.latency.is_empty() {
        bars.push(("latency", latency_bars(res)));
    }
    if !res.cpu.is_empty() {
        bars.push(("cpu", cpu_bars(res)));
    }
    if res.fence.iter().any(|r| r.stats.is_some()) {
        bars.push(("fence", fence_bars(res)));
    }
    if res.ps.as_ref().is_some_and(|p| p.rows.iter().any(|r| r.skipped.is_none())) {
        bars.push(("ps", ps_bars(res)));
    }
    for (name, b) in &bars {
        let h = 120 + 32 * b.rows.len() as u32 * (b.groups.len() as u32).max(2) / 2;
        let svg = dir.join(format!("{name}.svg"));
        draw_bars(&SVGBackend::new(&svg, (1100, h)).into_drawing_area(), b)?;
        let png = dir.join(format!("{name}.png"));
        draw_bars(&BitMapBackend::new(&png, (1100, h)).into_drawing_area(), b)?;
        files.extend([svg, png]);
    }
    if !res.throughput.is_empty() {
        let svg = dir.join("throughput.svg");
        draw_throughput(&SVGBackend::new(&svg, (1100, 600)).into_drawing_area(), res)?;
        let png = dir.join("throughput.png");
        draw_throughput(&BitMapBackend::new(&png, (1100, 600)).into_drawing_area(), res)?;
        files.extend([svg, png]);
    }
    Ok(files)
}
