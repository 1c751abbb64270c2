//! Draws the keyed store's cost growth (`docs/keyed-growth.svg`) from the keyed bench's
//! output: time per decision against the number of keys, at 1 and 2 threads, and resident
//! bytes per key, ours beside governor and the floor.
//!
//! ```sh
//! RATEWARDEN_KEYED_ALTERNATE=7 cargo bench -p ratewarden-memory --bench keyed -- 'growth|memory' \
//!     | tee target/keyed-growth.txt
//! cargo run -p ratewarden-memory --example growth_plot -- target/keyed-growth.txt docs/keyed-growth.svg
//! ```
//!
//! It reads the `ALT keyed/growth-…` lines (medians of alternating rounds) and the resident
//! memory table, and prints the table it drew as Markdown.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

/// The structures drawn, in the bench's names, with their colours.
const STRUCTURES: [(&str, RGBColor); 3] = [
    ("ratewarden", RGBColor(0x1f, 0x77, 0xb4)),
    ("governor", RGBColor(0xd6, 0x27, 0x28)),
    ("baseline", RGBColor(0x7f, 0x7f, 0x7f)),
];

/// What the bench measured at one key count for one structure.
#[derive(Debug, Default, Clone, Copy)]
struct Point {
    /// Wall nanoseconds of one decision on one thread, by thread count (1, 2).
    ns: [Option<f64>; 2],
    /// Millions of decisions a second, summed over threads, by thread count.
    rate: [Option<f64>; 2],
    /// Resident bytes per key.
    bytes: Option<f64>,
}

/// Key counts as the bench labels them.
fn keys_of(label: &str) -> Option<u64> {
    let (digits, scale) = match label.strip_suffix('M') {
        Some(d) => (d, 1_000_000),
        None => (label.strip_suffix('k')?, 1_000),
    };
    Some(digits.parse::<u64>().ok()? * scale)
}

/// Parses the bench's output into points by structure and key count.
fn parse(text: &str) -> BTreeMap<(String, u64), Point> {
    let mut points: BTreeMap<(String, u64), Point> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // ALT keyed/growth-1M 2-thread ratewarden 1.23 M/s [..] 1626 ns/decision/thread, ...
        if f.first() == Some(&"ALT") && f.len() > 7 {
            let Some(keys) = f[1].strip_prefix("keyed/growth-").and_then(keys_of) else {
                continue;
            };
            let threads = match f[2] {
                "1-thread" => 0,
                "2-thread" => 1,
                _ => continue,
            };
            let (Ok(rate), Ok(ns)) = (f[4].parse::<f64>(), f[7].parse::<f64>()) else {
                continue;
            };
            let point = points.entry((f[3].to_owned(), keys)).or_default();
            point.rate[threads] = Some(rate);
            point.ns[threads] = Some(ns);
        }
        // structure keys held RSS-B/key peak allocated key-len insert-ns
        if f.len() == 8 && STRUCTURES.iter().any(|(name, _)| *name == f[0]) {
            if let (Ok(keys), Ok(bytes)) = (f[1].parse::<u64>(), f[3].parse::<f64>()) {
                points.entry((f[0].to_owned(), keys)).or_default().bytes = Some(bytes);
            }
        }
    }
    points
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        return Err("usage: growth_plot BENCH_OUTPUT.txt OUT.svg".into());
    };
    let text = std::fs::read_to_string(input)
        .map_err(|e| format!("reading the bench output {input}: {e}"))?;
    let points = parse(&text);
    if !points.values().any(|p| p.ns[0].is_some()) {
        return Err(format!("{input}: no `ALT keyed/growth-…` lines (run the bench with RATEWARDEN_KEYED_ALTERNATE and the filter `growth|memory`)").into());
    }
    draw(Path::new(output), &points)?;

    println!("| keys | structure | ns/decision, 1 thread | ns/decision/thread, 2 threads | M decisions/s, 1 thread | M decisions/s, 2 threads | resident B/key |");
    println!("|---:|---|---:|---:|---:|---:|---:|");
    let cell = |v: Option<f64>, digits: usize| v.map_or("".to_owned(), |v| format!("{v:.digits$}"));
    let mut rows: Vec<_> = points.iter().collect();
    rows.sort_by_key(|((name, keys), _)| {
        let order = STRUCTURES.iter().position(|(n, _)| n == name).unwrap_or(9);
        (*keys, order)
    });
    for ((name, keys), p) in rows {
        if !STRUCTURES.iter().any(|(n, _)| n == name) {
            continue;
        }
        println!(
            "| {keys} | {name} | {} | {} | {} | {} | {} |",
            cell(p.ns[0], 0),
            cell(p.ns[1], 0),
            cell(p.rate[0], 2),
            cell(p.rate[1], 2),
            cell(p.bytes, 1)
        );
    }
    Ok(())
}

/// One figure read from a point.
type Reading = dyn Fn(&Point) -> Option<f64>;

/// Three panels: ns per decision at 1 thread, at 2 threads, and bytes per key, each against
/// keys on a log scale.
fn draw(path: &Path, points: &BTreeMap<(String, u64), Point>) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(path, (900, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "keyed decisions: cost against keys (uniform keys, 11-byte strings, GCRA)",
        ("sans-serif", 18),
    )?;
    let panels = root.split_evenly((3, 1));
    let series = |name: &str, value: &Reading| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter(|((n, _), _)| n == name)
            .filter_map(|((_, keys), p)| Some((*keys as f64, value(p)?)))
            .collect()
    };
    let panel_specs: [(&str, &Reading); 3] = [
        ("ns per decision, 1 thread", &|p| p.ns[0]),
        ("ns per decision per thread, 2 threads", &|p| p.ns[1]),
        ("resident bytes per key", &|p| p.bytes),
    ];
    for (panel, (caption, value)) in panels.iter().zip(panel_specs) {
        let top = STRUCTURES
            .iter()
            .flat_map(|(name, _)| series(name, value))
            .map(|(_, y)| y)
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 14))
            .margin(10)
            .x_label_area_size(28)
            .y_label_area_size(60)
            .build_cartesian_2d((500.0..2e7).log_scale(), 0.0..top * 1.15)?;
        chart
            .configure_mesh()
            .x_desc("keys")
            .x_label_formatter(&|x| format!("{x:.0e}"))
            .draw()?;
        for (name, color) in STRUCTURES {
            let points = series(name, value);
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
