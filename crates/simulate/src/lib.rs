//! `ratewarden simulate`: a trace of arrivals through one or every algorithm.
//!
//! The simulator is the product's teaching tool and its regression harness: the same trace,
//! decided by each algorithm with the same numbers, shown as a table, JSON lines, totals, or
//! the lesson's Figure 1 as an SVG picture.

mod args;
mod lineup;
pub mod load;
mod load_plot;
mod output;
mod plot;
pub mod retries;
mod trace;

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::process::ExitCode;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use ratewarden_core::{Algorithm, Decision, LimitState, Outcome};

pub use args::{
    Format, LoadArgs, LoadStrategy, RetriesArgs, Scenario, SimulateArgs, SimulateWhat,
    SIMULATE_EXAMPLES,
};
pub use lineup::{lineup, Lineup};
pub use output::{Jsonl, Sink, Summary, Table};
pub use plot::Plot;
pub use trace::{Arrival, LineError, TraceReader, FIGURE1};

/// Traces larger than this get a progress bar (when standard error is a terminal).
const PROGRESS_BYTES: u64 = 8 << 20;
/// Bad lines listed in full; the rest are only counted.
const SHOWN_ERRORS: usize = 20;

/// Totals for one algorithm over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Arrivals allowed at once.
    pub allowed: u64,
    /// Arrivals allowed after a delay (the queue).
    pub delayed: u64,
    /// Arrivals rejected until a retry time.
    pub limited: u64,
    /// Arrivals whose cost can never fit.
    pub never: u64,
    /// The longest delay, in nanoseconds.
    pub max_delay: u64,
}

impl Totals {
    fn count(&mut self, d: &Decision) {
        match d.outcome {
            Outcome::Allowed => self.allowed += 1,
            Outcome::Delayed { delay_ns } => {
                self.delayed += 1;
                self.max_delay = self.max_delay.max(delay_ns);
            }
            Outcome::Limited { .. } => self.limited += 1,
            Outcome::CostTooHigh => self.never += 1,
        }
    }

    /// Arrivals let through, at once or later.
    pub fn passed(&self) -> u64 {
        self.allowed + self.delayed
    }
}

/// What a run saw.
#[derive(Debug, Default)]
pub struct Report {
    /// Arrivals decided.
    pub arrivals: u64,
    /// Totals per algorithm, in lineup order.
    pub totals: Vec<Totals>,
    /// The first bad lines.
    pub errors: Vec<LineError>,
    /// How many lines were bad in all.
    pub bad_lines: u64,
}

/// Decides every arrival of `trace` with every limit of `lineup`, one state per key and limit,
/// and hands the decisions to `sink` (and `plot`, if any).
///
/// # Errors
///
/// Only when writing to the sink fails; bad trace lines are skipped and listed in the report.
pub fn run<R: BufRead>(
    lineup: &Lineup,
    trace: &mut TraceReader<R>,
    sink: &mut dyn Sink,
    mut plot: Option<&mut Plot>,
    progress: &ProgressBar,
) -> io::Result<Report> {
    let mut report = Report {
        totals: vec![Totals::default(); lineup.limits.len()],
        ..Report::default()
    };
    let mut states: HashMap<String, Vec<LimitState>> = HashMap::new();
    let mut decisions = Vec::with_capacity(lineup.limits.len());
    sink.start(lineup)?;
    while let Some(next) = trace.next() {
        let arrival = match next {
            Ok(arrival) => arrival,
            Err(e) => {
                report.bad_lines += 1;
                if report.errors.len() < SHOWN_ERRORS {
                    report.errors.push(e);
                }
                continue;
            }
        };
        let now = lineup.start_ns.saturating_add(arrival.at);
        let key_states = match states.get_mut(&arrival.key) {
            Some(s) => s,
            None => states
                .entry(arrival.key.clone())
                .or_insert_with(|| vec![LimitState::default(); lineup.limits.len()]),
        };
        decisions.clear();
        for ((limit, state), totals) in lineup
            .limits
            .iter()
            .zip(key_states.iter_mut())
            .zip(&mut report.totals)
        {
            let d = limit.decide(state, now, arrival.cost);
            totals.count(&d);
            decisions.push(d);
        }
        report.arrivals += 1;
        sink.arrival(&arrival, &decisions)?;
        if let Some(plot) = plot.as_deref_mut() {
            plot.add(&arrival, &decisions);
        }
        if report.arrivals % 4096 == 0 {
            progress.set_position(trace.bytes_read());
        }
    }
    progress.finish_and_clear();
    sink.finish(lineup, &report)?;
    Ok(report)
}

/// Writes `text` to the standard output; a reader that closed the pipe (`| head`) has seen
/// enough, and is not an error.
///
/// # Errors
///
/// Any other failure to write.
pub(crate) fn write_stdout(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Runs `ratewarden simulate`.
///
/// # Errors
///
/// Bad arguments, an unreadable trace, or an unwritable SVG file.
pub fn main(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    if let Some(what) = args.what {
        return match what {
            SimulateWhat::Retries(args) => retries::main(args),
            SimulateWhat::Load(load) => load::main(&load),
        };
    }
    let lineup = lineup(&args)?;
    for note in &lineup.notes {
        eprintln!("note: {note}");
    }
    let (input, size): (Box<dyn BufRead>, u64) = match args.trace.as_str() {
        "figure1" => (Box::new(FIGURE1.as_bytes()), 0),
        "-" => (Box::new(io::stdin().lock()), 0),
        path => {
            let file =
                File::open(path).with_context(|| format!("cannot open the trace `{path}`"))?;
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            (Box::new(BufReader::with_capacity(1 << 16, file)), size)
        }
    };
    let progress = if size >= PROGRESS_BYTES {
        let bar = ProgressBar::new(size);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} [{wide_bar}] {bytes_per_sec}, {eta} left",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut trace = TraceReader::new(input);
    let stdout = io::stdout().lock();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout);
    let mut sink: Box<dyn Sink + '_> = match args.format {
        Format::Table => Box::new(Table::new(&mut out)),
        Format::Jsonl => Box::new(Jsonl::new(&mut out)),
        Format::Summary => Box::new(Summary::new(&mut out)),
    };
    let mut plot = args.svg.as_ref().map(|_| Plot::new(&lineup));
    let report = match run(&lineup, &mut trace, &mut *sink, plot.as_mut(), &progress) {
        Ok(report) => report,
        // A closed pipe (`| head`) is the reader saying it has seen enough.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e).context("cannot write the decisions"),
    };
    drop(sink);
    match out.flush() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        other => other.context("cannot write the decisions")?,
    }
    if let (Some(path), Some(plot)) = (&args.svg, &plot) {
        let title = format!("{} ({})", trace_name(&args.trace), lineup.describe());
        plot.write_svg(path, &title)
            .with_context(|| format!("cannot draw `{}`", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if report.bad_lines > 0 {
        for e in &report.errors {
            eprintln!("error: {}:{e}", trace_name(&args.trace));
        }
        if report.bad_lines > report.errors.len() as u64 {
            let more = report.bad_lines - report.errors.len() as u64;
            eprintln!("error: … and {more} more bad lines");
        }
        eprintln!(
            "error: {} bad line(s) skipped; {} arrivals decided",
            report.bad_lines, report.arrivals
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn trace_name(trace: &str) -> &str {
    match trace {
        "-" => "<stdin>",
        other => other,
    }
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `ns` as exact decimal seconds, without trailing zeros: `0.7`, `1.25`, `2`.
pub fn seconds(ns: u64) -> String {
    decimal(ns, 1_000_000_000)
}

/// `ns` as exact decimal milliseconds, without trailing zeros: `200`, `333.333334`.
pub fn millis(ns: u64) -> String {
    decimal(ns, 1_000_000)
}

fn decimal(ns: u64, unit: u64) -> String {
    let whole = ns / unit;
    let frac = ns % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_print_exactly() {
        assert_eq!(seconds(700_000_000), "0.7");
        assert_eq!(seconds(2_000_000_000), "2");
        assert_eq!(seconds(1_250_000_001), "1.250000001");
        assert_eq!(millis(333_333_334), "333.333334");
        assert_eq!(millis(200_000_000), "200");
    }
}
