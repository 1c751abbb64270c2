//! Signals: SIGTERM and SIGINT stop the server, SIGHUP reloads its files.

use anyhow::Context;

use crate::serve::Running;

/// Waits for SIGTERM or SIGINT, reloading the config on every SIGHUP meanwhile.
pub(super) async fn signals(running: &Running) -> anyhow::Result<()> {
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
