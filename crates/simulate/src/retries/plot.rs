//! The picture: offered load and goodput over time, a line per strategy.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use super::{Run, Scenario};

/// A colour per strategy, worst (warm) to best (cool).
const COLOURS: [RGBColor; 7] = [
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
];

/// Draws offered load (attempts a second, top) and goodput (successes a second, bottom)
/// for every run, the outage shaded, to `path` as SVG.
///
/// # Errors
///
/// When the file cannot be written.
pub fn write_svg(path: &Path, scenario: &Scenario, runs: &[Run]) -> anyhow::Result<()> {
    let draw = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(path, (1000, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let (top, bottom) = root.split_vertically(400);
    let seconds = runs.iter().map(|r| r.seconds.len()).max().unwrap_or(1) as f64;
    let offered = scenario.rate * f64::from(scenario.clients);
    let outage = (
        scenario.outage_at.as_secs_f64(),
        (scenario.outage_at + scenario.outage).as_secs_f64(),
    );
    let panels = [
        (
            &top,
            "offered load: attempts per second (the retry storm)",
            true,
        ),
        (&bottom, "goodput: successful requests per second", false),
    ];
    for (area, title, attempts) in panels {
        let value = |s: &super::Second| if attempts { s.attempts } else { s.goodput } as f64;
        let peak = runs
            .iter()
            .flat_map(|r| r.seconds.iter().map(value))
            .fold(offered, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..seconds, 0.0..peak)
            .map_err(|e| draw(&e))?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .draw()
            .map_err(|e| draw(&e))?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(outage.0, 0.0), (outage.1, peak)],
                RGBColor(0xd6, 0x27, 0x28).mix(0.08).filled(),
            )))
            .map_err(|e| draw(&e))?;
        for (i, run) in runs.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let points = run
                .seconds
                .iter()
                .enumerate()
                .map(|(t, s)| (t as f64 + 0.5, value(s)));
            let series = chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(|e| draw(&e))?;
            if attempts {
                series.label(run.strategy.name()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
                });
            }
        }
        if attempts {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .draw()
                .map_err(|e| draw(&e))?;
        }
    }
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
