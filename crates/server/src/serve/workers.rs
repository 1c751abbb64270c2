//! Workers past the first: a thread each, with a single-threaded runtime accepting on the
//! same sockets as the first; and the gRPC listener's runtime.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::admin::Admin;
use super::api::Api;
use super::app::App;
use super::conn;
use super::envoy;
use super::gateway::{Gateway, Local};

/// What a listener serves, as `start` binds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The reverse proxy in front of `[server] upstream`.
    Gateway,
    /// The decision API: `/v1/check`, `/v1/settle`, `/v1/release`.
    Api,
    /// `/metrics`, `/live`, `/ready`, `/reload`.
    Admin,
}

impl Role {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Role::Gateway => "gateway",
            Role::Api => "api",
            Role::Admin => "admin",
        }
    }
}

/// One worker thread: its own single-threaded runtime serving every HTTP listener until
/// stopped.
pub(super) fn run(
    listeners: Vec<(std::net::TcpListener, Role, &'static str)>,
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
        let Ok(local) = Local::new(upstream.as_deref(), &app.started().bounds) else {
            return;
        };
        let local = Arc::new(local);
        let mut serving = JoinSet::new();
        if let Err(error) = spawn(&mut serving, listeners, &app, &local, &stopped, grace) {
            tracing::error!(%error, "a worker could not take its listeners");
        }
        while serving.join_next().await.is_some() {}
    });
    let _ = done.send(());
}

/// Serves the HTTP `listeners` (each with the `[server]` field that names it) on the
/// current runtime, a task each in `tasks`, until `stopped`: what every worker runs, the
/// first included.
///
/// # Errors
///
/// A listener the runtime cannot take (the tasks of those before it keep serving).
pub(super) fn spawn(
    tasks: &mut JoinSet<()>,
    listeners: Vec<(std::net::TcpListener, Role, &'static str)>,
    app: &Arc<App>,
    local: &Arc<Local>,
    stopped: &watch::Receiver<bool>,
    grace: std::time::Duration,
) -> std::io::Result<()> {
    for (listener, role, field) in listeners {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (app, stopped) = (Arc::clone(app), stopped.clone());
        let tls = match field {
            "listen" => app.tls.listen.clone(),
            "api" => app.tls.api.clone(),
            "admin" => app.tls.admin.clone(),
            _ => None,
        };
        match role {
            Role::Gateway => {
                let gateway = Arc::new(Gateway {
                    local: Arc::clone(local),
                });
                tasks.spawn(conn::serve(listener, gateway, app, stopped, grace, tls))
            }
            Role::Api => tasks.spawn(conn::serve(
                listener,
                Arc::new(Api),
                app,
                stopped,
                grace,
                tls,
            )),
            Role::Admin => tasks.spawn(conn::serve(
                listener,
                Arc::new(Admin),
                app,
                stopped,
                grace,
                tls,
            )),
        };
    }
    Ok(())
}

/// Envoy's gRPC listener on a thread that owns a work-stealing runtime of `threads` workers,
/// serving until `stopped`, then sending `done`.
///
/// # Errors
///
/// The thread or its runtime cannot be started, or the runtime cannot take the listener.
pub(super) fn grpc(
    listener: std::net::TcpListener,
    app: Arc<App>,
    stopped: watch::Receiver<bool>,
    threads: usize,
    done: tokio::sync::oneshot::Sender<()>,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name("ratewarden-grpc")
        .enable_all()
        .build()?;
    let listener = {
        let _entered = runtime.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    std::thread::Builder::new()
        .name("ratewarden-grpc".into())
        .spawn(move || {
            runtime.block_on(envoy::serve(listener, app, stopped));
            // Calls still running when the listener stopped are dropped with the runtime.
            runtime.shutdown_background();
            let _ = done.send(());
        })?;
    Ok(())
}
