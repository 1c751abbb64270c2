//! `prefetch` rules in a server: lapsed allowances given back a few times a horizon, and
//! every allowance given back when the server stops (their counters: `metrics/prefetch.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::app::App;

/// How often lapsed allowances are looked for: a unit held past its lapse is stranded
/// (never over-admitted) for at most this long.
const EVERY: Duration = Duration::from_millis(20);

/// Gives back lapsed allowances until the server stops, then every allowance.
pub(crate) async fn upkeep(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                app.engine.sweep_allowances(app.clock.now()).await;
            }
            _ = stop.changed() => {
                let given = app.engine.return_allowances(app.clock.now()).await;
                if given > 0 {
                    tracing::info!(units = given, "gave back prefetched allowances");
                }
                return;
            }
        }
    }
}
