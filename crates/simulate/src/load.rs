//! `ratewarden simulate load`: an upstream of fixed capacity overloaded, with and without an
//! adaptive concurrency limit in front of it, as a discrete-event simulation under a manual
//! clock (every event at an exact nanosecond, nothing random), so a run prints and draws
//! the same every time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt::Write as _;
use std::process::ExitCode;

use ratewarden_core::adaptive::{
    AdaptiveLimiter, AimdConfig, Completion, Criticality, Gradient2Config, GradientConfig,
    Strategy, Ticket, VegasConfig, WindowConfig,
};

use crate::args::{LoadArgs, LoadStrategy, Scenario};

const SEC: u64 = 1_000_000_000;
/// The figures are gathered in buckets of this long.
pub const BUCKET_NS: u64 = 100_000_000;
/// A phase's first second is the limit's to settle; its figures are taken after it.
const SETTLE_NS: u64 = SEC;
/// The shortest `--phase`: a second to settle, and a second to measure after it.
const MIN_PHASE_NS: u64 = 2 * SEC;
/// A phase's steady limit is the median of its last this long: long enough to outvote a
/// wobble, short enough to leave the phase's start to the settling.
pub const STEADY_NS: u64 = 3 * SEC;
/// The limit has settled once it stays within this share of its steady value (in
/// thousandths)...
pub const BAND_PERMILLE: u64 = 200;
/// ...or within this many requests, whichever is wider: a limit of 6 moves by whole
/// requests, and 20 % of it is less than one.
pub const BAND_MIN: u64 = 2;

/// One step of a scenario: `load` times the upstream's full capacity for `length_ns`,
/// against `capacity` of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Offered load, as a multiple of the full capacity.
    pub load: f64,
    /// The share of the upstream's workers at work.
    pub capacity: f64,
    /// How long, in nanoseconds.
    pub length_ns: u64,
}

/// The steps of `scenario`.
pub fn steps(scenario: Scenario) -> Vec<Step> {
    let step = |load, secs: u64| Step {
        load,
        capacity: 1.0,
        length_ns: secs * SEC,
    };
    // Half the workers, not a slower service: by Little's law the right limit is the
    // workers (throughput x unloaded latency), so a slower service leaves it where it is
    // and only losing workers makes it move.
    let capacity = |capacity, secs: u64| Step {
        capacity,
        ..step(1.5, secs)
    };
    match scenario {
        Scenario::Spike => vec![step(0.5, 5), step(1.4, 5), step(3.0, 5), step(0.5, 5)],
        Scenario::Steady => vec![step(0.5, 5), step(1.4, 15)],
        Scenario::Capacity => vec![capacity(1.0, 10), capacity(0.5, 10), capacity(1.0, 10)],
    }
}

/// The workers at work in `step` out of `workers`: at least one.
fn working(step: &Step, workers: u64) -> u64 {
    ((workers as f64 * step.capacity).round() as u64).max(1)
}

/// What happened in one bucket of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Its start, in nanoseconds.
    pub at_ns: u64,
    /// Arrivals.
    pub offered: u64,
    /// Answers the upstream gave.
    pub served: u64,
    /// Arrivals shed by the limit.
    pub shed: u64,
    /// The limit at the bucket's end (none without a limiter).
    pub limit: Option<u64>,
    /// Requests at the upstream (served or queued) at the bucket's end.
    pub in_flight: u64,
    /// The median and 99th percentile latency of the bucket's answers, in nanoseconds.
    pub p50_ns: u64,
    /// See `p50_ns`.
    pub p99_ns: u64,
}

/// One step's figures, after its first second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepFigures {
    /// When the step starts, in nanoseconds.
    pub start_ns: u64,
    /// Offered load, as a multiple of the full capacity.
    pub load: f64,
    /// The upstream's workers at work.
    pub workers: u64,
    /// Answers a second.
    pub goodput: f64,
    /// Median latency, in nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile latency, in nanoseconds.
    pub p99_ns: u64,
    /// Arrivals shed in the whole step.
    pub shed: u64,
    /// The limit at the step's end.
    pub limit: Option<u64>,
    /// The limit's steady value: the median of the step's last `STEADY_NS`.
    pub steady: Option<u64>,
    /// The lowest and highest limit in the step's last `STEADY_NS`: its wobble.
    pub wobble: Option<(u64, u64)>,
    /// How long into the step until the limit entered and stayed within `BAND_PERMILLE`
    /// (at least `BAND_MIN`) of `steady`; none without a limit, or when the limit left
    /// the band in the last `STEADY_NS` (a sawtooth, an oscillation: it never settled).
    pub settled_ns: Option<u64>,
}

/// One run: its name, its buckets and its steps' figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The strategy, or `no limit`.
    pub name: &'static str,
    /// Over time.
    pub buckets: Vec<Bucket>,
    /// Per step of the scenario.
    pub steps: Vec<StepFigures>,
}

/// The strategy `simulate load` runs, with the parameters `docs/adaptive.md` suggests for
/// an upstream of a few workers: windows of 100 ms, a floor of 2.
pub fn strategy(which: LoadStrategy, service_ns: u64) -> Strategy {
    match which {
        LoadStrategy::Gradient2 => Strategy::Gradient2(Gradient2Config {
            initial: 10,
            min: 2,
            max: 200,
            tolerance_permille: 1200,
            queue_size: Some(2),
            ..Gradient2Config::default()
        }),
        LoadStrategy::Vegas => Strategy::Vegas(VegasConfig {
            initial: 10,
            min: 2,
            max: 200,
            ..VegasConfig::default()
        }),
        LoadStrategy::Aimd => Strategy::Aimd(AimdConfig {
            initial: 10,
            min: 2,
            max: 200,
            // Twice the service time: a request that waited as long again timed out.
            timeout_ns: service_ns.saturating_mul(2),
            ..AimdConfig::default()
        }),
        LoadStrategy::Gradient => Strategy::Gradient(GradientConfig {
            max: 200,
            min_rtt_interval_ns: 5 * SEC,
            ..GradientConfig::default()
        }),
    }
}

/// The strategy with the defaults a rule gets when it names no parameters (the timeout of
/// AIMD aside, twice the service time as in `strategy`, since its default of 5 s would
/// never fire), and the default window: 1 s and 10 answers.
pub fn published(which: LoadStrategy, service_ns: u64) -> (Strategy, WindowConfig) {
    let strategy = match which {
        LoadStrategy::Gradient2 => Strategy::Gradient2(Gradient2Config::default()),
        LoadStrategy::Vegas => Strategy::Vegas(VegasConfig::default()),
        LoadStrategy::Aimd => Strategy::Aimd(AimdConfig {
            timeout_ns: service_ns.saturating_mul(2),
            ..AimdConfig::default()
        }),
        LoadStrategy::Gradient => Strategy::Gradient(GradientConfig::default()),
    };
    (strategy, WindowConfig::default())
}

/// The window every strategy updates on: 100 ms or 10 answers.
pub fn window() -> WindowConfig {
    WindowConfig {
        min_samples: 10,
        min_time_ns: BUCKET_NS,
        min_rtt_ns: 100_000,
    }
}

/// Every strategy, in the order the docs list them.
pub const STRATEGIES: [LoadStrategy; 4] = [
    LoadStrategy::Gradient2,
    LoadStrategy::Vegas,
    LoadStrategy::Aimd,
    LoadStrategy::Gradient,
];

/// The name of a strategy, as `--strategy` spells it.
pub fn name(which: LoadStrategy) -> &'static str {
    match which {
        LoadStrategy::Gradient2 => "gradient2",
        LoadStrategy::Vegas => "vegas",
        LoadStrategy::Aimd => "aimd",
        LoadStrategy::Gradient => "gradient",
    }
}

/// A request at the upstream.
struct Pending {
    arrived: u64,
    ticket: Option<Ticket>,
}

/// Runs `args`'s scenario against `workers` serving `service_ns` each, behind `limiter`
/// (none: no limit).
pub fn simulate(args: &LoadArgs, which: Option<LoadStrategy>) -> Run {
    let service_ns = u64::try_from(args.service.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    let workers = args.workers.max(1);
    let mut limiter = which.map(|w| {
        let (strategy, mut window) = if args.defaults {
            published(w, service_ns)
        } else {
            (strategy(w, service_ns), window())
        };
        if let Some(least) = args.window {
            window.min_time_ns = u64::try_from(least.as_nanos()).unwrap_or(u64::MAX);
        }
        let controller = strategy.build(window, 0, 1);
        AdaptiveLimiter::new(controller, 0, u64::MAX)
    });
    let mut steps = steps(args.scenario);
    if let Some(phase) = args.phase {
        let length_ns = u64::try_from(phase.as_nanos())
            .unwrap_or(u64::MAX)
            .max(MIN_PHASE_NS);
        for s in &mut steps {
            s.length_ns = length_ns;
        }
    }
    let end: u64 = steps.iter().map(|s| s.length_ns).sum();
    // When the workers at work change, and to how many (the first step's from the start).
    let mut active = steps.first().map_or(workers, |s| working(s, workers));
    let mut changes = Vec::new();
    let mut at = 0u64;
    let mut was = active;
    for s in &steps {
        let now = working(s, workers);
        if now != was {
            changes.push((at, now));
            was = now;
        }
        at += s.length_ns;
    }
    let mut changes = changes.into_iter().peekable();
    // Arrivals, evenly spaced: step by step, `load · workers / service` a second.
    let mut arrivals = Vec::new();
    let mut from = 0u64;
    for s in &steps {
        let per_ns = s.load * workers as f64 / service_ns as f64;
        let count = (per_ns * s.length_ns as f64).round() as u64;
        for i in 0..count {
            arrivals.push(from + (i as f64 / per_ns) as u64);
        }
        from += s.length_ns;
    }
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut busy: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut serving: Vec<Option<Pending>> = (0..workers).map(|_| None).collect();
    let mut free: Vec<u64> = (0..active).rev().collect();
    let mut buckets: Vec<Bucket> = Vec::new();
    let mut latencies: Vec<Vec<u64>> = Vec::new();
    let mut bucket = Bucket::default();
    let mut bucket_latencies = Vec::new();
    let mut next = arrivals.iter().copied().peekable();
    let mut started = 0u64;
    loop {
        let arrival = next.peek().copied();
        let done = busy.peek().map(|Reverse((t, _))| *t);
        let change = changes.peek().map(|&(t, _)| t);
        let Some(now) = [arrival, done, change].into_iter().flatten().min() else {
            break;
        };
        if now >= end {
            break;
        }
        while now >= bucket.at_ns + BUCKET_NS {
            bucket.limit = limiter.as_ref().map(AdaptiveLimiter::limit);
            bucket.in_flight = (queue.len() + busy.len()) as u64;
            let at = bucket.at_ns + BUCKET_NS;
            latencies.push(std::mem::take(&mut bucket_latencies));
            buckets.push(std::mem::replace(
                &mut bucket,
                Bucket {
                    at_ns: at,
                    ..Bucket::default()
                },
            ));
        }
        // Answers first: a place freed at the instant a request arrives is free for it.
        if done == Some(now) {
            let Some(Reverse((_, worker))) = busy.pop() else {
                break;
            };
            let slot = usize::try_from(worker).unwrap_or(0);
            if let Some(p) = serving[slot].take() {
                let latency = now - p.arrived;
                bucket.served += 1;
                bucket_latencies.push(latency);
                if let (Some(l), Some(t)) = (limiter.as_mut(), p.ticket) {
                    let completion = Completion {
                        rtt_ns: Some(latency),
                        dropped: false,
                    };
                    l.release(t, now, completion);
                }
            }
            // A worker taken away finishes what it serves and takes nothing more.
            if worker < active {
                free.push(worker);
            }
        } else if change == Some(now) {
            let Some((_, to)) = changes.next() else {
                break;
            };
            active = to;
            // Idle workers at work now, lowest first, as at the start.
            free = (0..active)
                .rev()
                .filter(|&w| serving[usize::try_from(w).unwrap_or(0)].is_none())
                .collect();
        } else {
            next.next();
            bucket.offered += 1;
            let ticket = match limiter.as_mut() {
                Some(l) => match l.acquire(Criticality::Default, now) {
                    Ok(t) => Some(t),
                    Err(_) => {
                        bucket.shed += 1;
                        continue;
                    }
                },
                None => None,
            };
            queue.push_back(Pending {
                arrived: now,
                ticket,
            });
        }
        while let (Some(&worker), false) = (free.last(), queue.is_empty()) {
            free.pop();
            let slot = usize::try_from(worker).unwrap_or(0);
            serving[slot] = queue.pop_front();
            busy.push(Reverse((
                now + super::noise::service_ns(args.noise, service_ns, started),
                worker,
            )));
            started += 1;
        }
    }
    while buckets.len() as u64 * BUCKET_NS < end {
        bucket.limit = limiter.as_ref().map(AdaptiveLimiter::limit);
        bucket.in_flight = (queue.len() + busy.len()) as u64;
        let at = bucket.at_ns + BUCKET_NS;
        latencies.push(std::mem::take(&mut bucket_latencies));
        buckets.push(std::mem::replace(
            &mut bucket,
            Bucket {
                at_ns: at,
                ..Bucket::default()
            },
        ));
    }
    for (b, l) in buckets.iter_mut().zip(&mut latencies) {
        b.p50_ns = quantile(l, 500);
        b.p99_ns = quantile(l, 990);
    }
    let figures = step_figures(&steps, workers, &buckets, &latencies);
    Run {
        name: which.map_or("no limit", name),
        buckets,
        steps: figures,
    }
}

/// The `permille` quantile of `values` by nearest rank (sorts them); 0 for none.
fn quantile(values: &mut [u64], permille: u64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    let n = values.len() as u64;
    let rank = (n * permille).div_ceil(1000).max(1);
    values[usize::try_from(rank - 1).unwrap_or(0)]
}

/// The limit's steady value over `limits` (time, limit) from `from` on: their median,
/// lowest and highest.
fn steady(limits: &[(u64, u64)], from: u64) -> Option<(u64, (u64, u64))> {
    let mut last: Vec<u64> = limits
        .iter()
        .filter(|&&(t, _)| t >= from)
        .map(|&(_, l)| l)
        .collect();
    let median = quantile(&mut last, 500);
    Some((median, (*last.first()?, *last.last()?)))
}

/// How long after `from` the limits (time, limit, one a bucket) entered and stayed within
/// the band around `steady`: the end of the last bucket outside it, 0 if none was; none
/// if one at `settled_by` or later was (the limit never settled).
pub fn settle_ns(limits: &[(u64, u64)], from: u64, steady: u64, settled_by: u64) -> Option<u64> {
    let band = (steady * BAND_PERMILLE / 1000).max(BAND_MIN);
    match limits
        .iter()
        .rev()
        .find(|&&(_, l)| l.abs_diff(steady) > band)
    {
        None => Some(0),
        Some(&(t, _)) if t >= settled_by => None,
        Some(&(t, _)) => Some(t + BUCKET_NS - from),
    }
}

fn step_figures(
    steps: &[Step],
    workers: u64,
    buckets: &[Bucket],
    latencies: &[Vec<u64>],
) -> Vec<StepFigures> {
    let mut from = 0;
    let mut figures = Vec::new();
    for s in steps {
        let to = from + s.length_ns;
        let within = |b: &&Bucket| b.at_ns >= from && b.at_ns < to;
        let settled = |b: &&Bucket| b.at_ns >= from + SETTLE_NS && b.at_ns < to;
        let after: Vec<&Bucket> = buckets.iter().filter(settled).collect();
        let served: u64 = after.iter().map(|b| b.served).sum();
        let mut l: Vec<u64> = buckets
            .iter()
            .zip(latencies)
            .filter(|(b, _)| settled(b))
            .flat_map(|(_, l)| l.iter().copied())
            .collect();
        let limits: Vec<(u64, u64)> = buckets
            .iter()
            .filter(within)
            .filter_map(|b| Some((b.at_ns, b.limit?)))
            .collect();
        let limit = limits.last().map(|&(_, l)| l);
        let steady_from = to.saturating_sub(STEADY_NS).max(from);
        let (steady, wobble) = steady(&limits, steady_from).unzip();
        let settled_ns = steady.and_then(|s| settle_ns(&limits, from, s, steady_from));
        figures.push(StepFigures {
            start_ns: from,
            load: s.load,
            workers: working(s, workers),
            goodput: served as f64 / ((to - from - SETTLE_NS) as f64 / SEC as f64),
            p50_ns: quantile(&mut l, 500),
            p99_ns: quantile(&mut l, 990),
            shed: buckets.iter().filter(within).map(|b| b.shed).sum(),
            limit,
            steady,
            wobble,
            settled_ns,
        });
        from = to;
    }
    figures
}

/// Runs `ratewarden simulate load`: the strategy, then no limit, printed side by side.
///
/// # Errors
///
/// A `--phase` under 2 s; an unwritable SVG file.
pub fn main(args: &LoadArgs) -> anyhow::Result<ExitCode> {
    if let Some(phase) = args.phase {
        if phase.as_nanos() < u128::from(MIN_PHASE_NS) {
            anyhow::bail!(
                "--phase {phase:?}: a phase must be at least 2s (its first second is the limit's \
                 to settle, the figures are taken after it)"
            );
        }
    }
    let service_ns = u64::try_from(args.service.as_nanos()).unwrap_or(u64::MAX);
    let capacity = args.workers as f64 * SEC as f64 / service_ns.max(1) as f64;
    let runs = [simulate(args, Some(args.strategy)), simulate(args, None)];
    let mut text = String::new();
    writeln!(
        text,
        "upstream: {} workers, {} each: {capacity:.0} answers a second",
        args.workers,
        ms(service_ns)
    )?;
    writeln!(
        text,
        "step  load  workers  limit  steady (wobble)      goodput         p50        p99    shed  settled"
    )?;
    for run in &runs {
        writeln!(text, "{}:", run.name)?;
        for (i, s) in run.steps.iter().enumerate() {
            // Goodput against the capacity of the step's workers.
            let of = s.workers as f64 * SEC as f64 / service_ns.max(1) as f64;
            writeln!(
                text,
                "{:>4}  {:>3.1}x  {:>7}  {:>5}  {:>15}  {:>6.1}/s {:>4.2}x  {:>9}  {:>9}  {:>6}  {}",
                i + 1,
                s.load,
                s.workers,
                s.limit.map_or("-".to_owned(), |l| l.to_string()),
                steady_cell(s),
                s.goodput,
                s.goodput / of,
                ms(s.p50_ns),
                ms(s.p99_ns),
                s.shed,
                settled_cell(s),
            )?;
        }
    }
    // Every strategy's settle times on the same scenario, for comparison.
    writeln!(text)?;
    writeln!(
        text,
        "every strategy: settled after each step, steady limit (wobble)"
    )?;
    for which in STRATEGIES {
        let run = simulate(args, Some(which));
        let times: Vec<String> = run
            .steps
            .iter()
            .map(|s| format!("{:>9} {:>15}", settled_cell(s), steady_cell(s)))
            .collect();
        writeln!(text, "{:>10}  {}", run.name, times.join("  "))?;
    }
    // A closed pipe (`| head`) ends the table, not the run: the picture is still drawn.
    super::write_stdout(&text)?;
    if let Some(path) = &args.svg {
        super::load_plot::write_svg(path, &runs, capacity)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The steady limit and its wobble, `-` without a limit.
fn steady_cell(s: &StepFigures) -> String {
    match (s.steady, s.wobble) {
        (Some(l), Some((low, high))) => format!("{l} ({low}-{high})"),
        _ => "-".to_owned(),
    }
}

/// The settle time, `never` if the limit did not settle, `-` without a limit.
fn settled_cell(s: &StepFigures) -> String {
    match (s.settled_ns, s.limit) {
        (Some(ns), _) => ms(ns),
        (None, Some(_)) => "never".to_owned(),
        (None, None) => "-".to_owned(),
    }
}

fn ms(ns: u64) -> String {
    format!("{:.1}ms", ns as f64 / 1e6)
}
