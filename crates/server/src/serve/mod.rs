//! `ratewarden serve`: the decision API, the gateway and the admin listener.
//!
//! [`start`] binds every listener of a config and serves until [`Running::shutdown`] (or a
//! signal, under [`main`]); tests start it in-process on `127.0.0.1:0` with a clock of
//! their own.

mod app;
mod envoy;
mod http;
mod logs;
mod metrics;
mod reply;
mod shed;
mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use ratewarden_core::{Clock, RealClock};
use ratewarden_memory::{MemoryStore, StoreConfig, WhenFull};
use ratewarden_policy::{Config, ConfigErrors, Engine};
use store::AnyStore;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::cli::ServeArgs;
use app::App;
pub use app::TokioClock;
use http::Role;

/// What to start: a validated config, where it came from (for reloads), and the clock.
pub struct Options {
    /// The config.
    pub config: Config,
    /// The file it was read from: `/reload`, SIGHUP and `Running::reload` read it again.
    pub config_path: Option<PathBuf>,
    /// Where decisions read the time.
    pub clock: Arc<dyn Clock>,
    /// envoyproxy/ratelimit configs for the gRPC service (empty without), and the file or
    /// directory they came from, for reloads.
    pub envoy: ratewarden_policy::envoy::EnvoyConfig,
    /// Where `envoy` was read from.
    pub envoy_path: Option<PathBuf>,
    /// Threads serving requests: the caller's runtime, and one more thread with a runtime of
    /// its own per extra worker, all accepting on the same sockets. `ratewarden serve` runs
    /// one per core.
    pub workers: usize,
}

/// A server that is running: its bound addresses, and the handles to reload and stop it.
pub struct Running {
    /// The main listener's address (the gateway with an upstream, the decision API without).
    pub listen: SocketAddr,
    /// The separate decision API listener's address, if configured.
    pub api: Option<SocketAddr>,
    /// The admin listener's address, if configured.
    pub admin: Option<SocketAddr>,
    /// The gRPC rate limit service's address, if configured.
    pub grpc: Option<SocketAddr>,
    app: Arc<App>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Running {
    /// Starts a graceful shutdown: the listeners stop accepting, requests in flight get
    /// `[server] shutdown_grace` to finish.
    pub fn shutdown(&self) {
        self.app.set_ready(false);
        let _ = self.stop.send(true);
    }

    /// Reads the config file and the Envoy configs again (off the async workers) and puts
    /// both in force together; on any error neither changes.
    ///
    /// # Errors
    ///
    /// Every problem in the files, or that there is no file to read.
    pub async fn reload(&self) -> Result<u64, ConfigErrors> {
        self.app.reload().await.map(|reloaded| reloaded.version)
    }

    /// Waits until every listener has stopped and every connection has finished (or the
    /// grace period ran out).
    pub async fn wait(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Binds every listener of `options.config` and starts serving.
///
/// # Errors
///
/// A listener that cannot be bound, an upstream that cannot be used, or a store this build
/// does not have.
pub async fn start(options: Options) -> anyhow::Result<Running> {
    let config = options.config;
    let settings = &config.store;
    // One builder for the shared store, so `check-config` refuses exactly what this refuses.
    let store = match crate::check_config::shared_store(settings)? {
        Some(redis) => AnyStore::Redis(Box::new(redis)),
        None => AnyStore::Memory(MemoryStore::new(StoreConfig {
            max_keys: settings.max_keys,
            max_bytes: settings.max_bytes,
            when_full: if settings.evict_when_full {
                WhenFull::EvictLeastRecentlyUsed
            } else {
                WhenFull::RejectNewKeys
            },
            ..StoreConfig::default()
        })),
    };
    let settings = config.server.clone();
    let store_settings = config.store.clone();
    let engine = Arc::new(Engine::with_envoy(config, options.envoy, store));
    let app = Arc::new(App::new(
        engine,
        settings.clone(),
        store_settings,
        options.config_path,
        options.clock,
        options.envoy_path,
    )?);

    let (stop, stopped) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let main_role = if settings.upstream.is_some() {
        Role::Gateway
    } else {
        Role::Api
    };
    let mut listeners = vec![(http::bind(settings.listen, "listen")?, main_role)];
    let listen_addr = listeners[0].0.local_addr()?;
    let mut api_addr = None;
    if let Some(addr) = settings.api {
        let api = http::bind(addr, "api")?;
        api_addr = Some(api.local_addr()?);
        listeners.push((api, Role::Api));
    }
    let mut grpc_addr = None;
    let grpc = match settings.grpc {
        Some(addr) => {
            let listener = http::bind(addr, "grpc")?;
            grpc_addr = Some(listener.local_addr()?);
            Some(listener)
        }
        None => None,
    };
    let mut admin_addr = None;
    if let Some(addr) = settings.admin {
        let admin = http::bind(addr, "admin")?;
        admin_addr = Some(admin.local_addr()?);
        listeners.push((admin, Role::Admin));
    }
    let grace = settings.shutdown_grace;
    // Workers past the first: a thread each, with a single-threaded runtime accepting on
    // the same sockets, so a request, its decision and its upstream call never cross
    // threads (what nginx gets from worker processes).
    for worker in 1..options.workers.max(1) {
        let mut clones = Vec::new();
        for (listener, role) in &listeners {
            clones.push((
                listener.try_clone().context("cannot share a listener")?,
                *role,
            ));
        }
        let grpc = match &grpc {
            Some(listener) => Some(listener.try_clone().context("cannot share a listener")?),
            None => None,
        };
        let (app, stopped) = (Arc::clone(&app), stopped.clone());
        let upstream = settings.upstream.clone();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("ratewarden-worker-{worker}"))
            .spawn(move || worker_thread(clones, grpc, app, upstream, stopped, grace, done))
            .context("cannot start a worker thread")?;
        tasks.spawn(async move {
            let _ = finished.await;
        });
    }
    let local = Arc::new(http::Local::new(
        settings.upstream.as_deref(),
        &settings.bounds,
    )?);
    for (listener, role) in listeners {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        tasks.spawn(http::serve(
            listener,
            role,
            Arc::clone(&app),
            Arc::clone(&local),
            stopped.clone(),
            grace,
        ));
    }
    if let Some(listener) = grpc {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        tasks.spawn(serve_grpc(listener, Arc::clone(&app), stopped.clone()));
    }
    tasks.spawn(app::sweep(Arc::clone(&app), stopped));
    tracing::info!(
        listen = %listen_addr,
        role = main_role.as_str(),
        api = ?api_addr,
        grpc = ?grpc_addr,
        admin = ?admin_addr,
        upstream = settings.upstream.as_deref().unwrap_or("none"),
        "ratewarden serving"
    );
    app.set_ready(true);
    Ok(Running {
        listen: listen_addr,
        api: api_addr,
        admin: admin_addr,
        grpc: grpc_addr,
        app,
        stop,
        tasks,
    })
}

/// Envoy's rate limit service on one runtime, until `stop`.
async fn serve_grpc(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    mut stop: watch::Receiver<bool>,
) {
    let service =
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer::new(
            envoy::Rls { app },
        );
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    let served = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "the gRPC listener failed");
    }
}

/// One worker thread: its own single-threaded runtime serving every listener (the gRPC one
/// too) until stopped.
fn worker_thread(
    listeners: Vec<(std::net::TcpListener, Role)>,
    grpc: Option<std::net::TcpListener>,
    app: Arc<App>,
    upstream: Option<String>,
    stopped: watch::Receiver<bool>,
    grace: std::time::Duration,
    done: tokio::sync::oneshot::Sender<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "a worker thread could not start its runtime");
            return;
        }
    };
    runtime.block_on(async move {
        // The upstream URL was checked when the first worker started.
        let Ok(local) = http::Local::new(upstream.as_deref(), &app.started().bounds) else {
            return;
        };
        let local = Arc::new(local);
        let mut serving = JoinSet::new();
        for (listener, role) in listeners {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    serving.spawn(http::serve(
                        listener,
                        role,
                        Arc::clone(&app),
                        Arc::clone(&local),
                        stopped.clone(),
                        grace,
                    ));
                }
                Err(error) => tracing::error!(%error, "a worker could not take a listener"),
            }
        }
        if let Some(listener) = grpc {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    serving.spawn(serve_grpc(listener, Arc::clone(&app), stopped.clone()));
                }
                Err(error) => tracing::error!(%error, "a worker could not take the gRPC listener"),
            }
        }
        while serving.join_next().await.is_some() {}
    });
    let _ = done.send(());
}

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
        (None, None) => Some(PathBuf::from("ratewarden.toml")),
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
    if envoy.is_some() && config.server.grpc.is_none() {
        eprintln!(
            "warning: --envoy-config without `[server] grpc`: Envoy's ShouldRateLimit is not served; add grpc = \"0.0.0.0:8081\""
        );
    }
    if let Some(listen) = args.listen {
        config.server.listen = listen;
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
        let grace = running.app.started().shutdown_grace;
        tracing::info!(grace = ?grace, "shutting down: finishing requests in flight");
        running.shutdown();
        running.wait().await;
        tracing::info!("stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// Waits for SIGTERM or SIGINT, reloading the config on every SIGHUP meanwhile.
async fn signals(running: &Running) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = hup.recv() => {
                // The outcome is logged (and counted) either way; the old rules stay on error.
                let _ = running.reload().await;
            }
        }
    }
}
