//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    #[command(after_help = ratewarden_simulate::SIMULATE_EXAMPLES)]
    Simulate(Box<ratewarden_simulate::SimulateArgs>),
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
    /// Print the completion script for a shell, generated from these same arguments.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page, ratewarden(1), in roff (`ratewarden man | man -l -`), or write it
    /// and a page for each command (ratewarden-serve(1), ...) into a folder.
    Man {
        /// The folder to write `ratewarden.1`, `ratewarden-serve.1`, ... into, such as
        /// `/usr/local/share/man/man1`.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  ratewarden completions bash > /etc/bash_completion.d/ratewarden
  ratewarden completions zsh > \"${fpath[1]}/_ratewarden\"
  ratewarden completions fish > ~/.config/fish/completions/ratewarden.fish";

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

  # Only envoyproxy/ratelimit configs: its ports, on every interface unless moved:
  ratewarden serve --envoy-config ratelimit/ --listen 127.0.0.1:8080 --grpc 127.0.0.1:8081

Without --config, `serve` reads ./ratewarden.toml; start from the repository's
examples/ratewarden.toml. --listen, --grpc and --admin override the file's addresses.
Set `[server] upstream = \"http://127.0.0.1:3000\"` to run as a gateway in front of a service,
and `[server] api` to serve the decision API beside it. SIGTERM or SIGINT stop accepting and
let requests in flight finish within `[server] shutdown_grace` (30s). Logs go to standard
error; RUST_LOG filters them (default `info`).";

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

    /// Serve Envoy's gRPC services here instead of `[server] grpc`, such as
    /// `127.0.0.1:8081`.
    #[arg(long, value_name = "ADDR")]
    pub grpc: Option<std::net::SocketAddr>,

    /// Serve the admin listener here instead of `[server] admin` (default
    /// `127.0.0.1:9090`), or `off`. Off loopback it needs a token, as in the file.
    #[arg(long, value_name = "ADDR|off", value_parser = parse_admin)]
    pub admin: Option<AdminAddr>,

    /// How to write logs.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Threads serving requests, each with its own event loop (default: one per core).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
}

/// `--admin`: an address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminAddr(pub Option<std::net::SocketAddr>);

fn parse_admin(s: &str) -> Result<AdminAddr, String> {
    if s == "off" {
        return Ok(AdminAddr(None));
    }
    s.parse()
        .map(|a| AdminAddr(Some(a)))
        .map_err(|_| format!("`{s}` is neither an address such as `127.0.0.1:9090` nor `off`"))
}

/// Log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object a line, for log pipelines.
    Json,
}
