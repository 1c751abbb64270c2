//! `ratewarden simulate`'s arguments: the binary's `Cli` takes them whole.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use ratewarden_core::{parse_duration, AlgorithmKind, CalendarUnit, Rate};

/// `ratewarden simulate --help`'s examples and trace format, after the arguments.
pub const SIMULATE_EXAMPLES: &str = "\
Examples:
  # The lesson's Figure 1, every algorithm at 5 a second:
  ratewarden simulate --trace figure1 --all --limit 5 --window 1s

  # One algorithm on a trace of your own (here from standard input), as JSON lines:
  printf '0\\n0.1\\n0.1\\n0.1\\n2.5,2\\n' | \\
    ratewarden simulate --trace - --algorithm gcra --rate 1/s --burst 2 --format jsonl

  # Draw the picture:
  ratewarden simulate --trace figure1 --all --svg figure1.svg

Trace files hold one arrival a line, `time_s[,cost[,key]]`: time in seconds from the start of
the trace (decimals are exact), an optional whole-number cost (default 1), and an optional key
(default `default`; each key has its own state). Lines starting with `#` and a header line
are skipped. Times must not go backwards.

Algorithms: fixed-window, sliding-log, sliding-window (--limit, --window); token-bucket,
leaky-bucket, gcra (--rate, --burst); leaky-queue (--rate, --burst = how many may wait);
quota (--limit, --period, --timezone); concurrency (--limit in flight, each arrival holding
its permit for --lease). Buckets without --rate/--burst get rate limit/window and burst
limit.";

/// Arguments of `ratewarden simulate`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimulateArgs {
    /// A simulation other than a trace through the algorithms.
    #[command(subcommand)]
    pub what: Option<SimulateWhat>,

    /// The trace: a file, `-` for standard input, or the built-in `figure1`.
    #[arg(long, short, default_value = "figure1", value_name = "FILE|figure1")]
    pub trace: String,

    /// Run one algorithm.
    #[arg(long, short, value_name = "NAME", value_parser = parse_kind, conflicts_with = "all")]
    pub algorithm: Option<AlgorithmKind>,

    /// Run every algorithm side by side at the nominal rate --limit per --window (the default
    /// when no --algorithm is given).
    #[arg(long)]
    pub all: bool,

    /// Units allowed per window (windows and quotas; buckets derive their numbers from it).
    #[arg(long, short, default_value_t = 5, value_name = "N")]
    pub limit: u64,

    /// The window, such as `1s`, `15m` or `1h`.
    #[arg(long, short, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub window: Duration,

    /// Bucket refill rate, such as `50/s` or `1000/15m` (default: limit per window).
    #[arg(long, short, value_parser = parse_rate, value_name = "COUNT/PERIOD")]
    pub rate: Option<Rate>,

    /// Bucket capacity; for leaky-queue, how many requests may wait (default: the limit).
    #[arg(long, short, value_name = "N")]
    pub burst: Option<u64>,

    /// Calendar period of a quota: second, minute, hour, day, week, month or year (default:
    /// the window, when it is one second, minute or hour).
    #[arg(long, value_parser = parse_period, value_name = "PERIOD")]
    pub period: Option<CalendarUnit>,

    /// How long a concurrency permit is held: the simulator has no completions, so each
    /// arrival holds its permit for this long (default: the window).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub lease: Option<Duration>,

    /// Time zone of a quota's calendar, an IANA name.
    #[arg(long, default_value = "UTC", value_name = "ZONE")]
    pub timezone: String,

    /// The wall-clock instant of the trace's time 0, in RFC 3339 (matters for quotas and
    /// window alignment).
    #[arg(long, default_value = "1970-01-01T00:00:00Z", value_name = "RFC3339")]
    pub start: String,

    /// How to print the decisions.
    #[arg(long, short, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// The sliding window's sub-windows: the window split into N slots, the oldest weighted.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub sub_windows: u32,

    /// Also draw the decisions as an SVG picture: a row per algorithm, arrivals on a time
    /// axis, passed and rejected marked apart.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// The simulations besides the trace.
#[derive(Debug, Subcommand)]
pub enum SimulateWhat {
    /// Retry storms: clients retrying a server through an outage, by strategy (no retry,
    /// immediate, fixed, exponential, full jitter, + retry budget, + adaptive throttling),
    /// with `ratewarden-client`'s own policy code.
    #[command(after_help = RETRIES_EXAMPLES)]
    Retries(RetriesArgs),
    /// Overload an upstream of fixed capacity, with and without an adaptive concurrency
    /// limit in front of it, under a manual clock: the same numbers every run.
    #[command(after_help = LOAD_EXAMPLES)]
    Load(LoadArgs),
    /// The sliding window counter against the exact sliding log on a trace (a file, or one
    /// generated): per source class, the requests it wrongly refused and wrongly admitted.
    #[command(after_help = crate::accuracy::EXAMPLES)]
    Accuracy(crate::accuracy::AccuracyArgs),
    /// Writes a seeded synthetic trace of many sources (log-normal rates, a few abusive) to
    /// standard output.
    Trace(crate::gen::GenArgs),
}

const LOAD_EXAMPLES: &str = "\
Examples:
  # 0.5x, 1.4x, 3x, then 0.5x the upstream's capacity, 5 s each, Gradient2 against no limit:
  ratewarden simulate load --scenario spike --svg spike.svg

  # Another strategy, another upstream:
  ratewarden simulate load --strategy vegas --workers 16 --service 50ms

  # The upstream loses half its workers for 10 s under 1.5x load: how fast the limit follows:
  ratewarden simulate load --scenario capacity --svg capacity.svg

The upstream serves `--workers` requests at a time, each for `--service`; the others wait in
its queue, first come first served, so latency grows with the queue. Arrivals are evenly
spaced. Printed per phase: goodput (answers a second, and against capacity), p50 and p99
latency, shed requests, the limit at the end, and how long the limit took to settle: from
the step until it entered and stayed within 20% (at least 2) of its steady value, the median
of the phase's last 3 s. Then the settle times of every strategy on the same scenario.";

/// Arguments of `ratewarden simulate load`.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// The offered load over time.
    #[arg(long, value_enum, default_value_t = Scenario::Spike)]
    pub scenario: Scenario,

    /// The adaptive strategy in front of the upstream.
    #[arg(long, value_enum, default_value_t = LoadStrategy::Gradient2)]
    pub strategy: LoadStrategy,

    /// Run the strategy with the defaults a rule gets when it names no parameters
    /// (Gradient2's fit 4 to 256 workers: a start of 4 doubled in a slow start, a floor of
    /// 1, a headroom of sqrt(L)/2) instead of the parameters for a small upstream.
    #[arg(long)]
    pub defaults: bool,

    /// How often the limit may move (the window's least time, its 10 answers aside),
    /// instead of 100 ms: `--defaults --window 1s` is the defaults with Netflix's window,
    /// which a large upstream's limit needs a minute of overload to climb through.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub window: Option<Duration>,

    /// Make every step of the scenario this long (`--scenario capacity --phase 60s`: what
    /// a minute of sustained overload does to the limit).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub phase: Option<Duration>,

    /// Requests the upstream serves at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub workers: u64,

    /// How long the upstream takes to serve one request (its mean, with `--noise`).
    #[arg(long, default_value = "100ms", value_parser = parse_duration, value_name = "DURATION")]
    pub service: Duration,

    /// How much the upstream's service time varies: `none`, a `tail` (unloaded p99 about
    /// 1.45x the service time, as a Python or JVM service's), or a `heavy` one (about 2x).
    #[arg(long, value_enum, default_value_t = Noise::None)]
    pub noise: Noise,

    /// Also draw the limit, in-flight, latency and goodput over time as an SVG picture.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

const RETRIES_EXAMPLES: &str = "\
Examples:
  # The standard scenario, every strategy, as a table:
  ratewarden simulate retries

  # And the picture:
  ratewarden simulate retries --svg docs/retry-storm.svg

  # A longer outage, two strategies:
  ratewarden simulate retries --outage 30s --duration 80s --strategy immediate --strategy budget

Figures: amplification = attempts / requests (over the run, and for requests made during the
outage); peak load = the busiest second's attempts over the offered rate; succeeded = the share
of requests that eventually got a 200; recovery = whole seconds after the outage until every
later second's requests succeed (95%).";

/// Arguments of `ratewarden simulate retries`.
#[derive(Debug, Clone, Args)]
pub struct RetriesArgs {
    /// Clients, each with its own policy (budget, throttle).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub clients: u32,
    /// Requests a second each client makes (Poisson arrivals).
    #[arg(long, default_value_t = 100.0, value_name = "PER_SECOND")]
    pub rate: f64,
    /// Requests a second the server completes.
    #[arg(long, default_value_t = 450.0, value_name = "PER_SECOND")]
    pub capacity: f64,
    /// The server's longest queue, as waiting time; beyond it, 503 at once.
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub queue: Duration,
    /// When the outage starts.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub outage_at: Duration,
    /// How long the server answers only 503.
    #[arg(long, default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub outage: Duration,
    /// When clients stop making new requests.
    #[arg(long, default_value = "40s", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    /// How long a client waits for an answer.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    /// Network time each way.
    #[arg(long, default_value = "5ms", value_parser = parse_duration, value_name = "DURATION")]
    pub latency: Duration,
    /// Attempts per request (the first included) for the retrying strategies.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub attempts: u32,
    /// The seed of arrivals and jitter.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run only these strategies (repeat the flag); all of them by default.
    #[arg(long, value_enum, value_name = "NAME")]
    pub strategy: Vec<crate::retries::Strategy>,
    /// Also draw offered load and goodput over time as an SVG picture.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

impl RetriesArgs {
    /// The scenario, checked.
    ///
    /// # Errors
    ///
    /// A setting that cannot make a run, named with its value.
    pub fn scenario(&self) -> anyhow::Result<crate::retries::Scenario> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(anyhow::anyhow!(
                    "--{name} must be a positive number of requests a second, not {v}"
                ))
            }
        };
        positive("rate", self.rate)?;
        positive("capacity", self.capacity)?;
        anyhow::ensure!(self.clients > 0, "--clients must be at least 1");
        anyhow::ensure!(self.attempts > 0, "--attempts must be at least 1");
        anyhow::ensure!(!self.timeout.is_zero(), "--timeout must be longer than 0s");
        anyhow::ensure!(
            self.duration <= Duration::from_secs(24 * 3600),
            "--duration {:?} is longer than a day",
            self.duration
        );
        Ok(crate::retries::Scenario {
            clients: self.clients,
            rate: self.rate,
            capacity: self.capacity,
            queue: self.queue,
            outage_at: self.outage_at,
            outage: self.outage,
            duration: self.duration,
            timeout: self.timeout,
            latency: self.latency,
            attempts: self.attempts,
            seed: self.seed,
        })
    }
}

/// Offered load over time, as multiples of the upstream's capacity, and that capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// 0.5x, 1.4x, 3x, 0.5x; 5 s each.
    Spike,
    /// 0.5x, then 1.4x for 15 s.
    Steady,
    /// 1.5x throughout while the upstream's capacity steps: all its workers, then half of
    /// them (a deploy, a node lost), then all again; 10 s each. The right limit moves with
    /// the workers, so the settle time says how fast a strategy follows.
    Capacity,
}

/// How much an upstream's service time varies in `simulate load`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Noise {
    /// Every request takes the service time.
    None,
    /// A fixed part and an exponential-like tail: unloaded p99 about 1.45x the mean.
    Tail,
    /// A longer tail: unloaded p99 about 2x the mean.
    Heavy,
}

/// The strategies `simulate load` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoadStrategy {
    /// Netflix's Gradient2.
    Gradient2,
    /// Netflix's Vegas.
    Vegas,
    /// Additive increase, multiplicative decrease.
    Aimd,
    /// Envoy's gradient controller.
    Gradient,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A row per arrival, a column per algorithm, totals at the end.
    Table,
    /// One JSON object per arrival and algorithm.
    Jsonl,
    /// Only the totals per algorithm (for large traces).
    Summary,
}

fn parse_kind(s: &str) -> Result<AlgorithmKind, String> {
    s.parse().map_err(|e: ratewarden_core::Error| e.to_string())
}

fn parse_rate(s: &str) -> Result<Rate, String> {
    s.parse().map_err(|e: ratewarden_core::Error| e.to_string())
}

fn parse_period(s: &str) -> Result<CalendarUnit, String> {
    s.parse().map_err(|e: ratewarden_core::Error| e.to_string())
}
