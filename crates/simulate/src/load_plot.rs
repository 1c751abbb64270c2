//! `simulate load --svg`: the limit, in-flight, latency and goodput over time, a strategy
//! against no limit, one panel each.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use super::load::{Run, BUCKET_NS};

/// The series' labels in the upper left of `chart`.
macro_rules! legend {
    ($chart:ident) => {
        $chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
    };
}

/// The scenario's steps as dashed vertical lines from `$low` to `$high` on `$chart`, so a
/// reader sees what the limit answers to.
macro_rules! steps {
    ($chart:ident, $starts:expr, $low:expr, $high:expr, $draw:ident) => {
        for &at in $starts {
            $chart
                .draw_series(DashedLineSeries::new(
                    [(at, $low), (at, $high)],
                    4,
                    4,
                    BLACK.mix(0.4).stroke_width(1),
                ))
                .map_err(|e| $draw(&e))?;
        }
    };
}

/// Draws `runs` (the strategy first, then no limit) to `path`; `capacity` is the upstream's
/// with all its workers, in answers a second.
///
/// # Errors
///
/// When the file cannot be written.
pub fn write_svg(path: &Path, runs: &[Run], capacity: f64) -> anyhow::Result<()> {
    let draw = |e: &dyn std::fmt::Display| anyhow!("drawing failed: {e}");
    let root = SVGBackend::new(path, (960, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let steps = runs.first().map_or(&[][..], |r| &r.steps[..]);
    let changes_workers = steps.windows(2).any(|w| w[0].workers != w[1].workers);
    let title = if changes_workers {
        format!(
            "{} against no limit: an upstream of {capacity:.0} answers a second losing half its workers",
            runs.first().map_or("adaptive", |r| r.name)
        )
    } else {
        format!(
            "{} against no limit: an upstream of {capacity:.0} answers a second, overloaded",
            runs.first().map_or("adaptive", |r| r.name)
        )
    };
    let starts: Vec<f64> = steps
        .iter()
        .skip(1)
        .map(|s| s.start_ns as f64 / 1e9)
        .collect();
    let root = root
        .titled(&title, ("sans-serif", 18))
        .map_err(|e| draw(&e))?;
    let panels = root.split_evenly((4, 1));
    let end = runs
        .iter()
        .flat_map(|r| r.buckets.last())
        .map(|b| (b.at_ns + BUCKET_NS) as f64 / 1e9)
        .fold(1.0, f64::max);
    let colors = [RGBColor(0x1f, 0x77, 0xb4), RGBColor(0xd6, 0x27, 0x28)];
    let t = |ns: u64| ns as f64 / 1e9;
    // Limit and in-flight.
    let top = runs
        .iter()
        .flat_map(|r| &r.buckets)
        .map(|b| b.in_flight.max(b.limit.unwrap_or(0)))
        .max()
        .unwrap_or(1) as f64;
    let mut chart = ChartBuilder::on(&panels[0])
        .caption("limit and requests at the upstream", ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(24)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, (1.0..top * 1.2).log_scale())
        .map_err(|e| draw(&e))?;
    chart.configure_mesh().draw().map_err(|e| draw(&e))?;
    steps!(chart, &starts, 1.0, top * 1.2, draw);
    // The upstream's workers: the concurrency it serves without queueing.
    let mut workers = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let until = steps.get(i + 1).map_or(end, |n| t(n.start_ns));
        workers.push((t(s.start_ns), s.workers as f64));
        workers.push((until, s.workers as f64));
    }
    chart
        .draw_series(LineSeries::new(workers, BLACK.stroke_width(1)))
        .map_err(|e| draw(&e))?
        .label("upstream workers")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
    for (run, color) in runs.iter().zip(colors) {
        let points = run
            .buckets
            .iter()
            .filter_map(|b| Some((t(b.at_ns), b.limit? as f64)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(format!("{}: limit", run.name))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        let points = run
            .buckets
            .iter()
            .map(|b| (t(b.at_ns), (b.in_flight as f64).max(1.0)));
        chart
            .draw_series(LineSeries::new(points, color.mix(0.5).stroke_width(1)))
            .map_err(|e| draw(&e))?
            .label(format!("{}: in flight", run.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.mix(0.5)));
    }
    legend!(chart).map_err(|e| draw(&e))?;
    // Latency.
    let slowest = runs
        .iter()
        .flat_map(|r| &r.buckets)
        .map(|b| b.p99_ns)
        .max()
        .unwrap_or(1) as f64
        / 1e6;
    let mut chart = ChartBuilder::on(&panels[1])
        .caption("latency (ms): p99 solid, p50 faint", ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(24)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, (1.0..slowest * 1.2).log_scale())
        .map_err(|e| draw(&e))?;
    chart.configure_mesh().draw().map_err(|e| draw(&e))?;
    steps!(chart, &starts, 1.0, slowest * 1.2, draw);
    for (run, color) in runs.iter().zip(colors) {
        let answered = || run.buckets.iter().filter(|b| b.served > 0);
        let p99 = answered().map(|b| (t(b.at_ns), b.p99_ns as f64 / 1e6));
        chart
            .draw_series(LineSeries::new(p99, color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(format!("{}: p99", run.name))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        let p50 = answered().map(|b| (t(b.at_ns), b.p50_ns as f64 / 1e6));
        chart
            .draw_series(LineSeries::new(p50, color.mix(0.5).stroke_width(1)))
            .map_err(|e| draw(&e))?;
    }
    legend!(chart).map_err(|e| draw(&e))?;
    // Goodput and offered load.
    let per_sec = 1e9 / BUCKET_NS as f64;
    let most = runs
        .iter()
        .flat_map(|r| &r.buckets)
        .map(|b| b.offered.max(b.served))
        .max()
        .unwrap_or(1) as f64
        * per_sec;
    let mut chart = ChartBuilder::on(&panels[2])
        .caption("answers a second (offered load dashed)", ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(24)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..most * 1.1)
        .map_err(|e| draw(&e))?;
    chart.configure_mesh().draw().map_err(|e| draw(&e))?;
    steps!(chart, &starts, 0.0, most * 1.1, draw);
    if let Some(run) = runs.first() {
        let offered = run
            .buckets
            .iter()
            .map(|b| (t(b.at_ns), b.offered as f64 * per_sec));
        chart
            .draw_series(DashedLineSeries::new(offered, 6, 4, BLACK.stroke_width(1)))
            .map_err(|e| draw(&e))?
            .label("offered")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
    }
    for (run, color) in runs.iter().zip(colors) {
        let served = run
            .buckets
            .iter()
            .map(|b| (t(b.at_ns), b.served as f64 * per_sec));
        chart
            .draw_series(LineSeries::new(served, color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(format!("{}: goodput", run.name))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    legend!(chart).map_err(|e| draw(&e))?;
    // Shed.
    let mut chart = ChartBuilder::on(&panels[3])
        .caption("shed a second (503)", ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..most * 1.1)
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .draw()
        .map_err(|e| draw(&e))?;
    steps!(chart, &starts, 0.0, most * 1.1, draw);
    if let Some(run) = runs.first() {
        let shed = run
            .buckets
            .iter()
            .map(|b| (t(b.at_ns), b.shed as f64 * per_sec));
        let color = colors[0];
        chart
            .draw_series(LineSeries::new(shed, color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(format!("{}: shed", run.name))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    legend!(chart).map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
