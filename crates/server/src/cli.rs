//! Command-line arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ratewarden_core::{parse_duration, AlgorithmKind, CalendarUnit, Rate};

/// Ratewarden: a rate limiter, exact to the request.
#[derive(Debug, Parser)]
#[command(name = "ratewarden", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the decision API, or the gateway in front of `[server] upstream`, with the
    /// config's rules; reload them on SIGHUP or `POST /reload` on the admin listener.
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Run a trace of arrivals through one or every algorithm and show each decision.
    #[command(after_help = SIMULATE_EXAMPLES)]
    Simulate(Box<SimulateArgs>),
    /// Validate a config file and print the rules it resolves to (exit status 1 on errors,
    /// each naming the file, line, column and rule).
    CheckConfig {
        /// The config file, such as `examples/ratewarden.toml`.
        file: PathBuf,
    },
    /// Show what every rule would do with one request, and why (matched or not and which
    /// `match` field failed, the key, its state, the decision), charging nothing. On a
    /// shared store the state is the live one; in memory every key is new.
    #[command(after_help = EXPLAIN_EXAMPLES)]
    Explain {
        /// The config file, such as `examples/ratewarden.toml`.
        #[arg(long, short, value_name = "FILE")]
        config: PathBuf,
        /// The request, as the decision API's `POST /v1/check` takes it (JSON).
        #[arg(long, short, value_name = "JSON")]
        request: String,
        /// Print the admin API's JSON (`POST /v1/explain`) instead of text.
        #[arg(long)]
        json: bool,
    },
}

const EXPLAIN_EXAMPLES: &str = "\
Examples:
  ratewarden explain --config examples/ratewarden.toml \\
    --request '{\"ip\": \"203.0.113.7\", \"method\": \"POST\", \"path\": \"/login\"}'

  # Against a running server's live state, on its admin listener:
  curl -s --json '{\"ip\": \"203.0.113.7\", \"api_key\": \"k1\"}' localhost:9090/v1/explain";

const SERVE_EXAMPLES: &str = "\
Examples:
  # The example config: the decision API on 127.0.0.1:8080, admin on 127.0.0.1:9090.
  ratewarden serve --config examples/ratewarden.toml

  # Ask for a decision:
  curl -s localhost:8080/v1/check -H 'content-type: application/json' \\
    -d '{\"ip\":\"203.0.113.7\",\"path\":\"/login\",\"method\":\"POST\"}'

  # Reload the rules after editing the file (a bad file keeps the old rules), by signal
  # or on the admin listener:
  kill -HUP $(pidof ratewarden)
  curl -s -X POST localhost:9090/reload -H 'content-type: application/json'

Set `[server] upstream = \"http://127.0.0.1:3000\"` to run as a gateway in front of a service,
and `[server] api` to serve the decision API beside it. SIGTERM or SIGINT stop accepting and
let requests in flight finish within `[server] shutdown_grace` (30s). Logs go to standard
error; RUST_LOG filters them (default `info`).";

const SIMULATE_EXAMPLES: &str = "\
Examples:
  # The lesson's Figure 1, every algorithm at 5 a second:
  ratewarden simulate --trace figure1 --all --limit 5 --window 1s

  # One algorithm, as JSON lines:
  ratewarden simulate --trace my.csv --algorithm gcra --rate 50/s --burst 100 --format jsonl

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
pub struct SimulateArgs {
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

    /// Also draw the decisions as an SVG picture: a row per algorithm, arrivals on a time
    /// axis, passed and rejected marked apart.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// Arguments of `ratewarden serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The config file (default `ratewarden.toml`, unless only --envoy-config is given).
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// envoyproxy/ratelimit YAML configs, as they are: one file or a directory of them,
    /// served over Envoy's gRPC rate limit protocol on `[server] grpc`. Alone, the server
    /// listens where envoyproxy/ratelimit does: gRPC on 0.0.0.0:8081, HTTP on 0.0.0.0:8080.
    #[arg(long, value_name = "PATH")]
    pub envoy_config: Option<PathBuf>,

    /// Listen here instead of `[server] listen`, such as `0.0.0.0:8080`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,

    /// How to write logs.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Threads serving requests, each with its own event loop (default: one per core).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
}

/// Log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object a line, for log pipelines.
    Json,
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
