//! The lesson's Figure 1 as a picture: a row per algorithm, arrivals on a time axis.

use std::path::Path;

use anyhow::anyhow;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use ratewarden_core::{Decision, Outcome};

use super::{Arrival, Lineup};

/// Beyond this many arrivals the picture stops adding points (it would be unreadable anyway).
const MAX_ARRIVALS: usize = 100_000;

#[derive(Debug, Clone, Copy)]
enum Mark {
    Passed,
    Delayed { until: f64 },
    Rejected,
}

/// Decisions collected for drawing.
#[derive(Debug)]
pub struct Plot {
    names: Vec<&'static str>,
    marks: Vec<(f64, usize, Mark)>,
    arrivals: usize,
}

impl Plot {
    /// An empty picture for `lineup`'s algorithms.
    pub fn new(lineup: &Lineup) -> Self {
        Self {
            names: lineup.limits.iter().map(|l| l.kind().as_str()).collect(),
            marks: Vec::new(),
            arrivals: 0,
        }
    }

    /// Adds one arrival's decisions.
    pub fn add(&mut self, arrival: &Arrival, decisions: &[Decision]) {
        self.arrivals += 1;
        if self.arrivals > MAX_ARRIVALS {
            return;
        }
        // Plotting coordinates are floats; decisions were made in integers already.
        let t = arrival.at as f64 / 1e9;
        for (row, d) in decisions.iter().enumerate() {
            let mark = match d.outcome {
                Outcome::Allowed => Mark::Passed,
                Outcome::Delayed { delay_ns } => Mark::Delayed {
                    until: t + delay_ns as f64 / 1e9,
                },
                Outcome::Limited { .. } | Outcome::CostTooHigh => Mark::Rejected,
            };
            self.marks.push((t, row, mark));
        }
    }

    /// Draws the picture to `path` as SVG.
    ///
    /// # Errors
    ///
    /// When the file cannot be written.
    pub fn write_svg(&self, path: &Path, title: &str) -> anyhow::Result<()> {
        if self.arrivals > MAX_ARRIVALS {
            eprintln!(
                "note: the picture shows the first {MAX_ARRIVALS} of {} arrivals",
                self.arrivals
            );
        }
        let rows = self.names.len();
        let (first, last) = self.marks.iter().fold((f64::MAX, f64::MIN), |(lo, hi), m| {
            let end = match m.2 {
                Mark::Delayed { until } => until,
                _ => m.0,
            };
            (lo.min(m.0), hi.max(end))
        });
        let (first, last) = if self.marks.is_empty() {
            (0.0, 1.0)
        } else {
            (first, last)
        };
        let pad = ((last - first) * 0.04).max(0.05);
        // One extra band at the top holds the legend.
        let height = 120 + 48 * u32::try_from(rows + 1).unwrap_or(9);
        let root = SVGBackend::new(path, (960, height)).into_drawing_area();
        let draw = |e: &dyn std::fmt::Display| anyhow!("drawing failed: {e}");
        root.fill(&WHITE).map_err(|e| draw(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(120)
            .build_cartesian_2d((first - pad)..(last + pad), (0..rows + 1).into_segmented())
            .map_err(|e| draw(&e))?;
        let names = &self.names;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(rows + 2)
            .y_label_formatter(&|v| match v {
                // Row 0 is drawn at the top.
                SegmentValue::CenterOf(i) if *i < rows => names[rows - 1 - i].to_owned(),
                _ => String::new(),
            })
            .x_desc("time (s)")
            .draw()
            .map_err(|e| draw(&e))?;
        let y = |row: usize| SegmentValue::CenterOf(rows - 1 - row);
        let green = RGBColor(0x1b, 0x9e, 0x4b);
        let red = RGBColor(0xd6, 0x27, 0x28);
        let blue = RGBColor(0x1f, 0x77, 0xb4);
        chart
            .draw_series(
                self.marks
                    .iter()
                    .filter(|m| matches!(m.2, Mark::Delayed { .. }))
                    .map(|&(t, row, mark)| {
                        let Mark::Delayed { until } = mark else {
                            unreachable!("filtered")
                        };
                        PathElement::new(vec![(t, y(row)), (until, y(row))], blue.stroke_width(1))
                    }),
            )
            .map_err(|e| draw(&e))?
            .label("held in the queue")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], blue.stroke_width(1))
            });
        chart
            .draw_series(self.marks.iter().filter_map(|&(_, row, mark)| match mark {
                Mark::Delayed { until } => {
                    Some(Circle::new((until, y(row)), 4, blue.stroke_width(2)))
                }
                _ => None,
            }))
            .map_err(|e| draw(&e))?
            .label("released from the queue")
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, blue.stroke_width(2)));
        chart
            .draw_series(
                self.marks
                    .iter()
                    .filter(|m| !matches!(m.2, Mark::Rejected))
                    .map(|&(t, row, _)| Circle::new((t, y(row)), 5, green.filled())),
            )
            .map_err(|e| draw(&e))?
            .label("passed")
            .legend(move |(x, y)| Circle::new((x + 8, y), 5, green.filled()));
        chart
            .draw_series(
                self.marks
                    .iter()
                    .filter(|m| matches!(m.2, Mark::Rejected))
                    .map(|&(t, row, _)| Cross::new((t, y(row)), 5, red.stroke_width(2))),
            )
            .map_err(|e| draw(&e))?
            .label("rejected")
            .legend(move |(x, y)| Cross::new((x + 8, y), 5, red.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(|e| draw(&e))?;
        root.present().map_err(|e| draw(&e))?;
        Ok(())
    }
}
