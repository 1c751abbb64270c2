//! `ratewarden simulate trace`: a seeded synthetic trace of many sources, most of them
//! well-behaved, a few abusive, for measuring an approximation against the exact log.
//!
//! Each normal source sends at a rate drawn from a log-normal law (median `--median`, spread
//! `--sigma` in natural log units); each abusive one at a rate drawn evenly from
//! `--abusive-rate`. Arrivals of a source form a Poisson process (exponential gaps), so even a
//! calm source now and then sends a burst; `--shape` makes that rate change over time (bursts,
//! a slow daily ramp, on/off), which is where a counter's estimate errs. Times are whole
//! microseconds. The same flags and seed give the same trace, byte for byte.

use std::io::{self, Write};

use anyhow::bail;
use clap::{Args, ValueEnum};

use super::trace::Arrival;

/// The flags of a generated trace, shared by `simulate trace` and `simulate accuracy`.
#[derive(Debug, Clone, Args)]
pub struct GenArgs {
    /// Sources (keys) in the trace.
    #[arg(long, default_value_t = 5_000, value_name = "N")]
    pub sources: u32,

    /// The trace's length in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub seconds: u64,

    /// Percent of the sources that are abusive (whole number).
    #[arg(long, default_value_t = 1, value_name = "PERCENT")]
    pub abusive: u32,

    /// The median rate of a normal source, per second.
    #[arg(long, default_value_t = 1.0, value_name = "PER_SECOND")]
    pub median: f64,

    /// The spread of normal sources' rates: the standard deviation of their natural log.
    #[arg(long, default_value_t = 1.0, value_name = "SIGMA")]
    pub sigma: f64,

    /// The rates of abusive sources, per second: `LOW-HIGH`.
    #[arg(long, default_value = "20-50", value_name = "LOW-HIGH")]
    pub abusive_rate: String,

    /// The seed: the same seed, the same trace.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// How each source's rate changes over the trace.
    #[arg(long, value_enum, default_value_t = Shape::Poisson)]
    pub shape: Shape,
}

/// How a source's rate changes over time; each source keeps its drawn rate as the level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Shape {
    /// A steady rate: a Poisson process.
    #[default]
    Poisson,
    /// The rate times [`BURST_FACTOR`] for bursts of 1 s on average, one every 20 s on
    /// average, steady between.
    Bursts,
    /// The rate ramps smoothly between 0.2 and 1.8 times the level, one cycle over the trace,
    /// each source at its own phase.
    Diurnal,
    /// Sending at the rate for 5 s on average, then silent for 5 s on average.
    OnOff,
}

/// How much faster a source of [`Shape::Bursts`] sends in a burst.
pub const BURST_FACTOR: f64 = 4.0;

impl Shape {
    /// The flag's spelling (`on-off`).
    pub fn name(self) -> &'static str {
        match self {
            Shape::Poisson => "poisson",
            Shape::Bursts => "bursts",
            Shape::Diurnal => "diurnal",
            Shape::OnOff => "on-off",
        }
    }
}

/// A source's class, the first part of its key (`normal-000042`, `abusive-0007`).
pub fn class_of(key: &str) -> &str {
    key.split_once('-').map_or(key, |(class, _)| class)
}

/// SplitMix64: small, seedable, and the same everywhere.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: never 0, so its logarithm is finite.
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

fn abusive_range(text: &str) -> anyhow::Result<(f64, f64)> {
    let parsed = text
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<f64>().ok()?, b.trim().parse::<f64>().ok()?)));
    match parsed {
        Some((low, high)) if low > 0.0 && low <= high && high.is_finite() => Ok((low, high)),
        _ => bail!("--abusive-rate `{text}`: write LOW-HIGH per second, such as `20-50`"),
    }
}

/// The trace `args` describe: arrivals in time order (ties by source), cost 1 each.
///
/// # Errors
///
/// A bad `--abusive-rate`, a rate that is not positive, or no sources.
pub fn generate(args: &GenArgs) -> anyhow::Result<Vec<Arrival>> {
    let (low, high) = abusive_range(&args.abusive_rate)?;
    if args.sources == 0 || args.seconds == 0 {
        bail!("--sources and --seconds must be above zero");
    }
    if !(args.median > 0.0 && args.median.is_finite() && args.sigma >= 0.0) {
        bail!("--median must be above zero and --sigma at least zero");
    }
    if args.abusive > 100 {
        bail!("--abusive is a percentage, at most 100");
    }
    let mut rng = SplitMix(args.seed);
    let abusive = (u64::from(args.sources) * u64::from(args.abusive)).div_ceil(100) as u32;
    let end_us = args.seconds.saturating_mul(1_000_000);
    let width = args.sources.to_string().len();
    let mut all: Vec<(u64, u32)> = Vec::new();
    let mut keys = Vec::with_capacity(args.sources as usize);
    for source in 0..args.sources {
        // Abusive sources are spread through the numbering, not bunched at its end.
        let is_abusive = abusive > 0
            && u64::from(source) * u64::from(abusive) / u64::from(args.sources)
                != (u64::from(source) + 1) * u64::from(abusive) / u64::from(args.sources);
        let rate = if is_abusive {
            low + (high - low) * rng.unit()
        } else {
            args.median * (args.sigma * rng.normal()).exp()
        };
        let class = if is_abusive { "abusive" } else { "normal" };
        keys.push(format!("{class}-{source:0width$}"));
        arrivals(&mut rng, args.shape, rate, end_us, |us| {
            all.push((us, source))
        });
    }
    all.sort_unstable();
    Ok(all
        .into_iter()
        .enumerate()
        .map(|(i, (us, source))| Arrival {
            line: i + 1,
            at: us * 1_000,
            cost: 1,
            key: keys[source as usize].clone(),
        })
        .collect())
}

/// Calls `push` with each arrival time (microseconds, ascending, below `end_us`) of one source
/// of level `rate` and `shape`.
fn arrivals(rng: &mut SplitMix, shape: Shape, rate: f64, end_us: u64, mut push: impl FnMut(u64)) {
    let end = end_us as f64 / 1e6;
    let mut push = |at: f64| {
        let us = (at * 1e6) as u64;
        if us < end_us {
            push(us);
        }
    };
    // Periods of a steady rate: (length, rate) in turn from 0; the process is memoryless, so
    // restarting the gaps at each period's start keeps it a Poisson process within each.
    let mut steady = |rng: &mut SplitMix, periods: &mut dyn FnMut(&mut SplitMix) -> (f64, f64)| {
        let mut start = 0.0f64;
        while start < end {
            let (length, r) = periods(rng);
            let stop = (start + length).min(end);
            let mut at = start;
            if r > 0.0 {
                loop {
                    at += -rng.unit().ln() / r;
                    if at >= stop {
                        break;
                    }
                    push(at);
                }
            }
            start = stop;
        }
    };
    match shape {
        Shape::Poisson => {
            let mut at = 0.0f64;
            loop {
                at += -rng.unit().ln() / rate;
                if (at * 1e6) as u64 >= end_us {
                    break;
                }
                push(at);
            }
        }
        Shape::Bursts => {
            let mut calm = rng.unit() < 0.95;
            steady(rng, &mut |rng| {
                calm = !calm;
                if calm {
                    (-rng.unit().ln() * 20.0, rate)
                } else {
                    (-rng.unit().ln(), rate * BURST_FACTOR)
                }
            });
        }
        Shape::OnOff => {
            let mut on = rng.unit() < 0.5;
            steady(rng, &mut |rng| {
                on = !on;
                (-rng.unit().ln() * 5.0, if on { rate } else { 0.0 })
            });
        }
        Shape::Diurnal => {
            // Thinning: candidates at the peak rate, each kept with the rate's share of it.
            let phase = std::f64::consts::TAU * rng.unit();
            let peak = rate * 1.8;
            let mut at = 0.0f64;
            loop {
                at += -rng.unit().ln() / peak;
                if at >= end {
                    break;
                }
                let level = 1.0 + 0.8 * (std::f64::consts::TAU * at / end + phase).sin();
                if rng.unit() * 1.8 < level {
                    push(at);
                }
            }
        }
    }
}

/// Writes `arrivals` as a trace file (`time_s,cost,key`), with a header naming how it was made.
///
/// # Errors
///
/// Any failure to write.
pub fn write(out: &mut dyn Write, args: &GenArgs, arrivals: &[Arrival]) -> io::Result<()> {
    write!(
        out,
        "# ratewarden simulate trace --sources {} --seconds {} --abusive {} --median {} --sigma {} --abusive-rate {} --seed {}",
        args.sources, args.seconds, args.abusive, args.median, args.sigma, args.abusive_rate, args.seed
    )?;
    // The default is left out, so traces made before the flag read the same.
    if args.shape != Shape::Poisson {
        write!(out, " --shape {}", args.shape.name())?;
    }
    writeln!(out)?;
    for a in arrivals {
        writeln!(
            out,
            "{}.{:06},{},{}",
            a.at / 1_000_000_000,
            a.at % 1_000_000_000 / 1_000,
            a.cost,
            a.key
        )?;
    }
    out.flush()
}

/// Runs `ratewarden simulate trace`: the trace on standard output.
///
/// # Errors
///
/// Bad flags, or standard output failing (a closed pipe is not a failure).
pub fn main(args: &GenArgs) -> anyhow::Result<std::process::ExitCode> {
    let arrivals = generate(args)?;
    let stdout = io::stdout().lock();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout);
    match write(&mut out, args, &arrivals) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(std::process::ExitCode::SUCCESS),
    }
}
