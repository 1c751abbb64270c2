//! The handle on a started server: its addresses, reload and shutdown.

use std::net::SocketAddr;
use std::sync::Arc;

use ratewarden_policy::ConfigErrors;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::app::App;

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
    pub(super) app: Arc<App>,
    pub(super) stop: watch::Sender<bool>,
    pub(super) tasks: JoinSet<()>,
}

impl Running {
    /// How long a shutdown lets requests in flight finish, as the config loaded at start says.
    pub fn shutdown_grace(&self) -> std::time::Duration {
        self.app.started().shutdown_grace
    }

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

    /// The lanes of rule `rule`'s queue that the flow `value` (a tenant, an API key...)
    /// is dealt in this server; `None` when no rule of that name has a queue. They are
    /// keyed with a secret of this process, so only the process itself can tell.
    pub fn queue_hand(&self, rule: &str, value: &str) -> Option<Vec<usize>> {
        self.app.engine.queue_hand(rule, value)
    }

    /// Waits until every listener has stopped and every connection has finished (or the
    /// grace period ran out).
    pub async fn wait(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}
