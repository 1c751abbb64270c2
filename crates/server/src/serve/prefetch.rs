//! `prefetch` and `scope = "global"` rules in a server: lapsed allowances given back a few
//! times a horizon, every allowance given back when the server stops, and the global rules'
//! allowances topped up from the home store off the request path (their counters:
//! `metrics/prefetch.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::app::App;

/// How often lapsed allowances are looked for: a unit held past its lapse is stranded
/// (never over-admitted) for at most this long.
const EVERY: Duration = Duration::from_millis(20);

/// The most global keys topped up at one tick (a top-up is a task of its own).
const TOP_UPS: usize = 1024;

/// Gives back lapsed allowances and tops up the global rules' running low until the server
/// stops, then gives back every allowance.
pub(crate) async fn upkeep(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                top_up(&app);
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

/// Starts a top-up from the home store for every global key running low: each a task of
/// its own, so that a slow round trip for one key delays no other, and no request waits
/// for any (one on its way for a key makes the next attempt a no-op).
fn top_up(app: &Arc<App>) {
    for key in app.engine.global_due(TOP_UPS) {
        let app = Arc::clone(app);
        tokio::spawn(async move {
            if let Err(error) = app.engine.top_up_global(&key, || app.clock.now()).await {
                // The units in hand are still spent; once they are gone the rule's
                // `on_store_failure` answers, and the key is tried again next tick.
                tracing::debug!(%key, %error, "could not top up a global allowance");
            }
        });
    }
}
