//! Start-up: build the store and the engine, bind every listener, start the workers.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use ratewarden_core::Clock;
use ratewarden_policy::Config;
use ratewarden_policy::Engine;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::app::{self, App};
use super::conn;
use super::gateway::Local;
use super::prefetch;
use super::running::Running;
use super::store::{AnyStore, CONNECT_AT_START};
use super::workers;
use super::workers::Role;

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

/// Binds every listener of `options.config` and starts serving.
///
/// # Errors
///
/// A listener that cannot be bound, an upstream that cannot be used, or a store this build
/// does not have.
pub async fn start(options: Options) -> anyhow::Result<Running> {
    let config = options.config;
    // The file's validation refuses this too; a config built in code must not skip it.
    if config.server.admin_access.leaves_open(config.server.admin) {
        anyhow::bail!(
            "`[server] admin` ({}) is off loopback with no credential: set \
             `[server] admin_token_file` (or the {} environment variable), or \
             `[server] admin_insecure = true` to serve it open on purpose",
            config
                .server
                .admin
                .map(|a| a.to_string())
                .unwrap_or_default(),
            ratewarden_policy::ADMIN_TOKEN_ENV,
        );
    }
    let store = AnyStore::from_settings(&config.store)?;
    // A shared store's handshake (a connection, the library loaded) is several round trips,
    // past a decision's deadline: made now, the first decisions do not fall to
    // `on_store_failure`. One that does not finish soon goes on beside the first calls.
    if tokio::time::timeout(CONNECT_AT_START, store.connect())
        .await
        .is_err()
    {
        tracing::warn!(
            within = ?CONNECT_AT_START,
            "the store did not answer its handshake yet; the first calls wait for it, up to their deadline"
        );
    }
    let home = match &config.regions {
        Some(regions) => Some(AnyStore::home(&regions.home)?),
        None => None,
    };
    let no_trusted_proxies = config.trusted_proxies.is_empty();
    let settings = config.server.clone();
    let store_settings = config.store.clone();
    let engine = Engine::with_envoy(config, options.envoy, store);
    let engine = Arc::new(match home {
        Some(home) => engine.with_home(home),
        None => engine,
    });
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
    let mut listeners = vec![(conn::bind(settings.listen, "listen")?, main_role, "listen")];
    let listen_addr = listeners[0].0.local_addr()?;
    let mut api_addr = None;
    if let Some(addr) = settings.api {
        let api = conn::bind(addr, "api")?;
        api_addr = Some(api.local_addr()?);
        listeners.push((api, Role::Api, "api"));
    }
    let mut grpc_addr = None;
    let grpc = match settings.grpc {
        Some(addr) => {
            let listener = conn::bind(addr, "grpc")?;
            grpc_addr = Some(listener.local_addr()?);
            Some(listener)
        }
        None => None,
    };
    let mut admin_addr = None;
    if let Some(addr) = settings.admin {
        let admin = conn::bind(addr, "admin")?;
        admin_addr = Some(admin.local_addr()?);
        listeners.push((admin, Role::Admin, "admin"));
    }
    let grace = settings.shutdown_grace;
    // Workers past the first: a thread each, with a single-threaded runtime accepting on
    // the same sockets, so a request, its decision and its upstream call never cross
    // threads (what nginx gets from worker processes).
    for worker in 1..options.workers.max(1) {
        let mut clones = Vec::new();
        for (listener, role, field) in &listeners {
            clones.push((
                listener.try_clone().context("cannot share a listener")?,
                *role,
                *field,
            ));
        }
        let (app, stopped) = (Arc::clone(&app), stopped.clone());
        let upstream = settings.upstream.clone();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("ratewarden-worker-{worker}"))
            .spawn(move || workers::run(clones, app, upstream, stopped, grace, done))
            .context("cannot start a worker thread")?;
        tasks.spawn(async move {
            let _ = finished.await;
        });
    }
    // Envoy's gRPC calls are the opposite case: an Envoy opens one long-lived HTTP/2
    // connection per worker thread and multiplexes every call on it, so a connection per
    // thread would leave our other cores idle whenever two of them land on one worker.
    // Its listener runs on a work-stealing runtime of its own, where each call is a task
    // any of the threads may take.
    if let Some(listener) = grpc {
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        workers::grpc(
            listener,
            Arc::clone(&app),
            stopped.clone(),
            options.workers,
            done,
        )?;
        tasks.spawn(async move {
            let _ = finished.await;
        });
    }
    let local = Arc::new(Local::new(settings.upstream.as_deref(), &settings.bounds)?);
    workers::spawn(&mut tasks, listeners, &app, &local, &stopped, grace)?;
    tasks.spawn(app::sample(Arc::clone(&app), stopped.clone()));
    if app.engine.has_home() {
        // The home is a WAN away: its handshake's round trips would outlast the first
        // decisions' deadline, and they would fall to `on_store_failure`.
        let app = Arc::clone(&app);
        tokio::spawn(async move { app.engine.home().connect().await });
    }
    tasks.spawn(prefetch::upkeep(Arc::clone(&app), stopped.clone()));
    tasks.spawn(app::sweep(Arc::clone(&app), stopped));
    let off = |addr: Option<std::net::SocketAddr>| {
        addr.map_or_else(|| "off".to_owned(), |a| a.to_string())
    };
    tracing::info!(
        listen = %listen_addr,
        role = main_role.as_str(),
        api = %off(api_addr),
        grpc = %off(grpc_addr),
        admin = %off(admin_addr),
        admin_auth = crate::describe::admin_protection(&settings),
        upstream = settings.upstream.as_deref().unwrap_or("none"),
        store = %app.started_store().kind,
        rules = app.engine.rule_list().len(),
        envoy_domains = app.engine.envoy().domains().count(),
        "ratewarden serving"
    );
    // Forward-auth is on every decision API listener; without a trusted proxy it refuses
    // every proxy, and the proxy may show that 403 as an answer of its own.
    let forward_auth = if main_role == Role::Api {
        Some(listen_addr)
    } else {
        api_addr
    };
    if let (Some(addr), true) = (forward_auth, no_trusted_proxies) {
        tracing::warn!(
            api = %addr,
            "`[server] trusted_proxies` is empty: forward-auth (/v1/auth, /v1/auth/nginx, \
             /v1/auth/envoy) refuses every proxy with 403; name your proxies' addresses if \
             one asks here (docs/front-doors.md, \"Troubleshooting\")"
        );
    }
    if let Some(addr) = admin_addr.filter(|a| !a.ip().to_canonical().is_loopback()) {
        if settings.admin_access.token.is_none() {
            tracing::warn!(
                admin = %addr,
                "the admin listener is off loopback with no token (`[server] admin_insecure`): \
                 anyone who reaches it may reset keys and reload the config"
            );
        }
    }
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
