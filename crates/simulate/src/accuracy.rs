//! `ratewarden simulate accuracy`: a trace through the exact sliding log and the sliding
//! window counter side by side, counting per source class the requests the counter wrongly
//! refused (the log allowed them) and wrongly admitted (the log refused them).
//!
//! By default the counter is asked about the history the log admitted (charged with exactly
//! what the log allowed), so each disagreement is the estimate's own error at that request.
//! With `--own-state` each keeps its own state per key, as it would in service, and after a
//! disagreement the two remember different histories (a limited source's disagreements then
//! mostly measure that drift). The class of a key is the part of it
//! before the first `-` (`normal-0042` is `normal`); a source the log never limits is
//! *well-behaved* whatever its class, and the counter's error on those is the figure that
//! matters: requests refused that no limit was meant to refuse.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use ratewarden_core::algorithm::{HeapSize, SlidingLogState, SlidingWindowState};
use ratewarden_core::{parse_duration, Algorithm, DisplayDuration, SlidingLog, SlidingWindow};

use super::gen::{self, class_of, GenArgs};
use super::trace::{Arrival, TraceReader};

/// The examples `ratewarden simulate accuracy --help` ends with.
pub const EXAMPLES: &str = "\
Examples:
  # The published table: 5,000 sources for 5 minutes, 1% abusive, 10 a second:
  ratewarden simulate accuracy --limit 10 --window 1s --sub-windows 1,2,10

  # The same trace as a file, then compared from it:
  ratewarden simulate trace --seed 1 > trace.csv
  ratewarden simulate accuracy --trace trace.csv

  # Sources whose rate changes: bursts, a slow daily ramp, or on/off:
  ratewarden simulate accuracy --shape bursts --sources 2000 --seconds 86

  # The small sample trace in the repository:
  ratewarden simulate accuracy --trace fixtures/accuracy-sample.csv

A source's class is its key up to the first `-` (`normal-0042`); a source the exact log never
limits is also counted as well-behaved. Each algorithm keeps its own state per key.";

/// Arguments of `ratewarden simulate accuracy`.
#[derive(Debug, Clone, Args)]
pub struct AccuracyArgs {
    /// A trace file (`time_s,cost,key` a line), or `-` for standard input; without it, the
    /// trace the generator's flags below describe, made in memory.
    #[arg(long, short, value_name = "FILE")]
    pub trace: Option<String>,

    /// Units allowed per window.
    #[arg(long, short, default_value_t = 10, value_name = "N")]
    pub limit: u64,

    /// The window.
    #[arg(long, short, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub window: Duration,

    /// The counters to compare, by their sub-windows, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,10",
        value_name = "N,..."
    )]
    pub sub_windows: Vec<u32>,

    /// Let the counter keep its own state (charged with what it allowed) instead of asking it
    /// about the history the log admitted.
    #[arg(long)]
    pub own_state: bool,

    /// The generated trace's numbers (when no --trace is given).
    #[command(flatten)]
    pub gen: GenArgs,
}

/// One class's counts under one counter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassCounts {
    /// Sources of the class.
    pub sources: u64,
    /// Their requests.
    pub requests: u64,
    /// Of those, refused by the exact log.
    pub log_refused: u64,
    /// Refused by the counter while the log allowed them.
    pub wrongly_refused: u64,
    /// Allowed by the counter while the log refused them.
    pub wrongly_admitted: u64,
}

impl ClassCounts {
    fn add(&mut self, other: &ClassCounts) {
        self.sources += other.sources;
        self.requests += other.requests;
        self.log_refused += other.log_refused;
        self.wrongly_refused += other.wrongly_refused;
        self.wrongly_admitted += other.wrongly_admitted;
    }
}

/// The class every source the log never limited falls in, besides its own.
pub const WELL_BEHAVED: &str = "well-behaved";

/// One counter against the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterAccuracy {
    /// Its sub-windows.
    pub sub_windows: u32,
    /// Bytes of state a key holds under it.
    pub state_bytes: usize,
    /// Counts by class: each key's own class, [`WELL_BEHAVED`], and `all`.
    pub classes: BTreeMap<String, ClassCounts>,
}

/// What a comparison measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accuracy {
    /// Requests in the trace.
    pub requests: u64,
    /// Requests the log refused.
    pub log_refused: u64,
    /// The most bytes one key's log held.
    pub log_max_bytes: usize,
    /// The mean over keys of the most bytes each key's log held.
    pub log_mean_bytes: usize,
    /// One entry per counter, in the order asked.
    pub counters: Vec<CounterAccuracy>,
}

struct KeyRun {
    log: SlidingLogState,
    log_max_bytes: usize,
    counters: Vec<SlidingWindowState>,
    requests: u64,
    log_refused: u64,
    /// Per counter: wrongly refused, wrongly admitted.
    wrong: Vec<(u64, u64)>,
}

/// Runs `arrivals` through the log and a counter per entry of `sub_windows`, all at `limit`
/// per `window`; with `own_state` each counter charges what it allows, else what the log
/// allowed.
///
/// # Errors
///
/// A limit or a number of sub-windows the core refuses.
pub fn compare(
    arrivals: impl IntoIterator<Item = Arrival>,
    limit: u64,
    window: Duration,
    sub_windows: &[u32],
    own_state: bool,
) -> anyhow::Result<Accuracy> {
    let log = SlidingLog::new(limit, window).context("--limit/--window")?;
    let counters = sub_windows
        .iter()
        .map(|&n| {
            SlidingWindow::new(limit, window)
                .and_then(|sw| sw.with_sub_windows(n))
                .with_context(|| format!("--sub-windows {n}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut keys: HashMap<String, KeyRun> = HashMap::new();
    for a in arrivals {
        let run = keys.entry(a.key).or_insert_with(|| KeyRun {
            log: SlidingLogState::default(),
            log_max_bytes: 0,
            counters: vec![SlidingWindowState::default(); counters.len()],
            requests: 0,
            log_refused: 0,
            wrong: vec![(0, 0); counters.len()],
        });
        let exact = log.decide(&mut run.log, a.at, a.cost).is_allowed();
        run.log_max_bytes = run.log_max_bytes.max(run.log.heap_bytes());
        run.requests += 1;
        run.log_refused += u64::from(!exact);
        for ((counter, state), wrong) in counters.iter().zip(&mut run.counters).zip(&mut run.wrong)
        {
            let estimated = if own_state {
                counter.decide(state, a.at, a.cost).is_allowed()
            } else {
                let d = counter.peek(state, a.at, a.cost).is_allowed();
                if exact {
                    counter.settle(state, a.at, i64::try_from(a.cost).unwrap_or(i64::MAX));
                }
                d
            };
            match (exact, estimated) {
                (true, false) => wrong.0 += 1,
                (false, true) => wrong.1 += 1,
                _ => {}
            }
        }
    }
    let mut out = Accuracy {
        requests: 0,
        log_refused: 0,
        log_max_bytes: 0,
        log_mean_bytes: 0,
        counters: counters
            .iter()
            .map(|c| CounterAccuracy {
                sub_windows: c.sub_windows(),
                state_bytes: c.state_bytes(),
                classes: BTreeMap::new(),
            })
            .collect(),
    };
    let mut log_bytes = 0usize;
    for (key, run) in &keys {
        out.requests += run.requests;
        out.log_refused += run.log_refused;
        out.log_max_bytes = out.log_max_bytes.max(run.log_max_bytes);
        log_bytes += run.log_max_bytes;
        for (counter, &(refused, admitted)) in out.counters.iter_mut().zip(&run.wrong) {
            let own = ClassCounts {
                sources: 1,
                requests: run.requests,
                log_refused: run.log_refused,
                wrongly_refused: refused,
                wrongly_admitted: admitted,
            };
            let mut classes = vec![class_of(key), "all"];
            if run.log_refused == 0 {
                classes.push(WELL_BEHAVED);
            }
            for class in classes {
                counter
                    .classes
                    .entry(class.to_owned())
                    .or_default()
                    .add(&own);
            }
        }
    }
    out.log_mean_bytes = log_bytes.checked_div(keys.len()).unwrap_or(0);
    Ok(out)
}

/// `part / whole` as a percentage with four decimals (`0.0093%`).
pub fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".to_owned();
    }
    format!("{:.4}%", part as f64 * 100.0 / whole as f64)
}

/// The comparison as a Markdown table, a row per counter and class.
pub fn table(accuracy: &Accuracy) -> String {
    let mut out = String::new();
    out.push_str("| counter | bytes per key | class | sources | requests | wrongly refused | share | wrongly admitted | share |\n");
    out.push_str("|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for counter in &accuracy.counters {
        // The figure that matters first, then the classes, then everything.
        let mut order: Vec<&String> = counter.classes.keys().collect();
        order.sort_by_key(|c| {
            (
                c.as_str() != WELL_BEHAVED,
                c.as_str() == "all",
                c.to_string(),
            )
        });
        for class in order {
            let c = &counter.classes[class];
            let _ = writeln!(
                out,
                "| `sub_windows = {}` | {} | {} | {} | {} | {} | {} | {} | {} |",
                counter.sub_windows,
                counter.state_bytes,
                class,
                c.sources,
                c.requests,
                c.wrongly_refused,
                share(c.wrongly_refused, c.requests),
                c.wrongly_admitted,
                share(c.wrongly_admitted, c.requests),
            );
        }
    }
    out
}

/// Runs `ratewarden simulate accuracy`.
///
/// # Errors
///
/// Bad flags, or an unreadable or malformed trace (naming its line).
pub fn main(args: &AccuracyArgs) -> anyhow::Result<ExitCode> {
    let (arrivals, source) = match args.trace.as_deref() {
        None => (
            gen::generate(&args.gen)?,
            format!(
                "generated: {} sources ({}% abusive at {}/s), log-normal rates (median {}/s, sigma {}), shape {}, {} s, seed {}",
                args.gen.sources,
                args.gen.abusive,
                args.gen.abusive_rate,
                args.gen.median,
                args.gen.sigma,
                args.gen.shape.name(),
                args.gen.seconds,
                args.gen.seed
            ),
        ),
        Some(path) => {
            let input: Box<dyn BufRead> = if path == "-" {
                Box::new(io::stdin().lock())
            } else {
                let file = File::open(path)
                    .with_context(|| format!("cannot open the trace `{path}`"))?;
                Box::new(BufReader::with_capacity(1 << 16, file))
            };
            let mut arrivals = Vec::new();
            for next in TraceReader::new(input) {
                match next {
                    Ok(a) => arrivals.push(a),
                    Err(e) => bail!("{path}:{e}"),
                }
            }
            (arrivals, path.to_owned())
        }
    };
    let accuracy = compare(
        arrivals,
        args.limit,
        args.window,
        &args.sub_windows,
        args.own_state,
    )?;
    let mut text = format!(
        "trace {source}: {} requests; limit {} per {}; {}; the exact sliding log refused {} ({}) and \
         held at most {} bytes a key ({} on average over keys, at 16 a timestamp)\n\n",
        accuracy.requests,
        args.limit,
        DisplayDuration(args.window),
        if args.own_state {
            "each counter keeps its own state"
        } else {
            "each counter is charged what the log allowed"
        },
        accuracy.log_refused,
        share(accuracy.log_refused, accuracy.requests),
        accuracy.log_max_bytes,
        accuracy.log_mean_bytes,
    );
    text.push_str(&table(&accuracy));
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
