//! `ratewarden serve` as a command: load the files, start, serve until a signal says stop.
//! Above `serve`, beside the other commands: it reads the command line (`cli`), sets up the
//! logs (`logs`) and turns signals into reloads and a shutdown (`signals`); `serve` itself
//! knows none of them.

mod logs;
mod signals;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use ratewarden_core::RealClock;
use ratewarden_policy::ConfigErrors;

use crate::cli::ServeArgs;
use crate::serve::{start, Options};

use signals::signals;

/// The config `serve` reads without --config, in the working directory.
const DEFAULT_CONFIG: &str = "ratewarden.toml";

/// `ratewarden serve`: loads the config, serves until SIGTERM or SIGINT, reloads on SIGHUP.
///
/// # Errors
///
/// A config that does not load, or a server that cannot start.
pub fn main(args: ServeArgs) -> anyhow::Result<ExitCode> {
    logs::init(args.log_format);
    let report = |what: &std::path::Path, errors: &ConfigErrors| {
        eprintln!("{errors}");
        let n = errors.0.len();
        eprintln!(
            "error: {} has {n} problem{}; nothing started",
            what.display(),
            if n == 1 { "" } else { "s" }
        );
    };
    let envoy = match &args.envoy_config {
        Some(path) => match ratewarden_policy::envoy::load(path) {
            Ok(envoy) => Some((envoy, path.clone())),
            Err(errors) => {
                report(path, &errors);
                return Ok(ExitCode::from(1));
            }
        },
        None => None,
    };
    // With only envoyproxy/ratelimit configs, listen where that service does.
    let config_path = match (&args.config, &envoy) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(_)) => None,
        (None, None) => {
            let default = PathBuf::from(DEFAULT_CONFIG);
            if !default.exists() {
                eprintln!(
                    "error: no config: give one with --config FILE, or write ./{DEFAULT_CONFIG} \
                     (start from the repository's examples/ratewarden.toml: \
                     `ratewarden serve --config examples/ratewarden.toml`), or serve \
                     envoyproxy/ratelimit YAML with --envoy-config PATH"
                );
                return Ok(ExitCode::from(1));
            }
            Some(default)
        }
    };
    let mut config = match &config_path {
        Some(path) => match ratewarden_policy::config::load(path) {
            Ok(config) => config,
            Err(errors) => {
                report(path, &errors);
                return Ok(ExitCode::from(1));
            }
        },
        None => {
            let mut config = ratewarden_policy::config::parse("(defaults)", "")
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            config.server.listen = SocketAddr::from(([0, 0, 0, 0], 8080));
            config.server.grpc = Some(SocketAddr::from(([0, 0, 0, 0], 8081)));
            config
        }
    };
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    if let Some(grpc) = args.grpc {
        config.server.grpc = Some(grpc);
    }
    if let Some(admin) = args.admin {
        config.server.admin = admin.0;
    }
    if config_path.is_none() {
        let every = |a: Option<SocketAddr>| a.is_some_and(|a| a.ip().is_unspecified());
        if every(Some(config.server.listen)) || every(config.server.grpc) {
            tracing::warn!(
                listen = %config.server.listen,
                grpc = %config.server.grpc.map_or_else(|| "off".to_owned(), |a| a.to_string()),
                "no --config: listening where envoyproxy/ratelimit does, on every interface \
                 (0.0.0.0); move them with --listen and --grpc"
            );
        }
    }
    if envoy.is_some() && config.server.grpc.is_none() {
        eprintln!(
            "warning: --envoy-config without `[server] grpc`: Envoy's ShouldRateLimit is not served; add grpc = \"0.0.0.0:8081\" or --grpc 0.0.0.0:8081"
        );
    }
    let workers = args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let (envoy, envoy_path) = match envoy {
            Some((envoy, path)) => (envoy, Some(path)),
            None => (Default::default(), None),
        };
        let running = start(Options {
            config,
            config_path,
            clock: Arc::new(RealClock::new()),
            workers,
            envoy,
            envoy_path,
        })
        .await?;
        signals(&running).await?;
        let grace = running.shutdown_grace();
        tracing::info!(
            grace = %ratewarden_core::DisplayDuration(grace),
            "shutting down: finishing requests in flight"
        );
        running.shutdown();
        running.wait().await;
        tracing::info!("stopped");
        Ok(ExitCode::SUCCESS)
    })
}
