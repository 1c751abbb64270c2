//! Which algorithms a simulation runs, with which numbers.

use anyhow::{bail, Context};
use ratewarden_core::{
    AlgorithmKind, CalendarUnit, Concurrency, DisplayDuration, FixedWindow, Gcra, LeakyBucket,
    LeakyQueue, Limit, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};

use crate::args::SimulateArgs;

/// The limits a simulation runs side by side.
#[derive(Debug, Clone)]
pub struct Lineup {
    /// The limits, in the lesson's order.
    pub limits: Vec<Limit>,
    /// Unix nanoseconds of the trace's time 0.
    pub start_ns: u64,
    /// Things the user should know (an algorithm left out, and why).
    pub notes: Vec<String>,
    /// The numbers, for titles.
    numbers: String,
}

impl Lineup {
    /// The numbers the lineup runs at, for titles and headers.
    pub fn describe(&self) -> &str {
        &self.numbers
    }
}

/// Builds the lineup from the command line: one algorithm, or all of them at the nominal rate
/// `limit` per `window` (buckets get rate `limit / window` and burst `limit`).
///
/// # Errors
///
/// A parameter an algorithm rejects (naming the flag), an unknown time zone, a bad `--start`,
/// or a quota without a calendar period.
pub fn lineup(args: &SimulateArgs) -> anyhow::Result<Lineup> {
    let kinds: Vec<AlgorithmKind> = match args.algorithm {
        Some(kind) => vec![kind],
        None => AlgorithmKind::ALL.to_vec(),
    };
    let rate = match args.rate {
        Some(rate) => rate,
        None => Rate::new(args.limit, args.window)
            .context("the buckets' rate comes from --limit per --window")?,
    };
    let burst = args.burst.unwrap_or(args.limit);
    let start: jiff::Timestamp = args
        .start
        .parse()
        .with_context(|| format!("--start `{}` is not an RFC 3339 instant", args.start))?;
    let start_ns = u64::try_from(start.as_nanosecond())
        .ok()
        .with_context(|| format!("--start `{}` is before 1970", args.start))?;
    let mut limits = Vec::new();
    let mut notes = Vec::new();
    let window = args.window;
    for kind in kinds {
        let limit: Limit = match kind {
            AlgorithmKind::FixedWindow => FixedWindow::new(args.limit, window)
                .context("fixed-window: --limit/--window")?
                .into(),
            AlgorithmKind::SlidingLog => SlidingLog::new(args.limit, window)
                .context("sliding-log: --limit/--window")?
                .into(),
            AlgorithmKind::SlidingWindow => SlidingWindow::new(args.limit, window)
                .context("sliding-window: --limit/--window")?
                .into(),
            AlgorithmKind::TokenBucket => TokenBucket::new(rate, burst)
                .context("token-bucket: --burst")?
                .into(),
            AlgorithmKind::LeakyBucket => LeakyBucket::new(rate, burst)
                .context("leaky-bucket: --burst")?
                .into(),
            AlgorithmKind::LeakyQueue => LeakyQueue::new(rate, burst)
                .context("leaky-queue: --burst")?
                .into(),
            AlgorithmKind::Gcra => Gcra::new(rate, burst).context("gcra: --burst")?.into(),
            AlgorithmKind::Quota => {
                let Some(period) = args
                    .period
                    .or_else(|| CalendarUnit::of_fixed_length(window))
                else {
                    let why = "quota needs a calendar period (--period second, minute, hour, \
                               day, week, month or year)";
                    if args.algorithm.is_some() {
                        bail!("{why}");
                    }
                    notes.push(format!("quota left out: {why}"));
                    continue;
                };
                Quota::new(args.limit, period, &args.timezone)
                    .context("quota: --limit/--timezone")?
                    .into()
            }
            AlgorithmKind::Concurrency => {
                Concurrency::new(args.limit, args.lease.unwrap_or(window))
                    .context("concurrency: --limit/--lease")?
                    .into()
            }
        };
        limits.push(limit);
    }
    let numbers = match args.algorithm {
        Some(kind) if kind.is_bucket() => format!("{kind}, rate {rate}, burst {burst}"),
        Some(kind) => format!(
            "{kind}, limit {} per {}",
            args.limit,
            DisplayDuration(args.window)
        ),
        None => format!(
            "limit {} per {}; buckets at {rate}, burst {burst}",
            args.limit,
            DisplayDuration(args.window)
        ),
    };
    Ok(Lineup {
        limits,
        start_ns,
        notes,
        numbers,
    })
}
