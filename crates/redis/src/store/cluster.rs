//! A call on a Redis Cluster, sent again only where Redis says it did not run.
//!
//! A decision changes counts, so it must run once. The cluster client's own retries are
//! off (`connection.rs`): after a lost connection or a timeout the script may have run, and
//! the client would run it again. The store resends only on the answers a node gives
//! *instead of* running the command: `MOVED` (sent to the node named), `ASK` (sent there
//! after `ASKING`), and `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING` or `READONLY`
//! (sent again by slot after a short pause, while the Cluster settles or the client learns
//! the new owner). Anything else, a connection lost mid-call included, fails the call,
//! and the rule's failure policy answers. The store's deadline bounds the whole.

use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ErrorKind, ServerErrorKind};

use super::RedisError;

/// Sends after a redirect or a "try again" before the call gives up (the deadline usually
/// ends it sooner).
const RESENDS: u32 = 8;

/// The pause before sending again after `TRYAGAIN`, `CLUSTERDOWN` and the like.
const SETTLE: Duration = Duration::from_millis(5);

/// What to do after an error, by whether the command ran.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Resend {
    /// To this node (`host`, `port`), as it is (`MOVED`) or after `ASKING` (`ASK`).
    To {
        host: String,
        port: u16,
        asking: bool,
    },
    /// By slot again, after a pause.
    Later,
    /// Not at all: the command may have run.
    Never,
}

/// Whether, and where, a command that failed with `e` may be sent again: only where the
/// node said it did not run it.
pub(super) fn resend(e: &redis::RedisError) -> Resend {
    let ErrorKind::Server(kind) = e.kind() else {
        return Resend::Never;
    };
    match kind {
        ServerErrorKind::Moved | ServerErrorKind::Ask => {
            let to = e.redirect_node().and_then(|(node, _slot)| {
                let (host, port) = node.rsplit_once(':')?;
                Some((host.to_owned(), port.parse().ok()?))
            });
            match to {
                Some((host, port)) => Resend::To {
                    host,
                    port,
                    asking: kind == ServerErrorKind::Ask,
                },
                None => Resend::Later,
            }
        }
        ServerErrorKind::TryAgain
        | ServerErrorKind::ClusterDown
        | ServerErrorKind::MasterDown
        | ServerErrorKind::BusyLoading
        | ServerErrorKind::ReadOnly => Resend::Later,
        _ => Resend::Never,
    }
}

/// Sends `cmd`, and sends it again where [`resend`] allows.
pub(super) async fn query<T: redis::FromRedisValue>(
    connection: &mut ClusterConnection,
    cmd: &redis::Cmd,
) -> Result<T, RedisError> {
    let mut reply = cmd.query_async::<T>(connection).await;
    for _ in 0..RESENDS {
        let Err(e) = &reply else { break };
        reply = match resend(e) {
            Resend::Never => break,
            Resend::Later => {
                tokio::time::sleep(SETTLE).await;
                cmd.query_async(connection).await
            }
            Resend::To {
                host,
                port,
                asking: false,
            } => {
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                connection
                    .route_command(cmd.clone(), to)
                    .await
                    .and_then(typed)
            }
            Resend::To {
                host,
                port,
                asking: true,
            } => {
                let mut asking = redis::pipe();
                asking.cmd("ASKING").add_command(cmd.clone());
                let to = SingleNodeRoutingInfo::ByAddress { host, port };
                connection
                    .route_pipeline(asking, 0, 2, to)
                    .await
                    .and_then(|values| {
                        values.into_iter().nth(1).ok_or_else(|| {
                            redis::RedisError::from((ErrorKind::Client, "no reply after ASKING"))
                        })
                    })
                    .and_then(typed)
            }
        };
    }
    Ok(reply?)
}

/// A reply routed by hand, as the type asked for (a server's error as an error).
fn typed<T: redis::FromRedisValue>(value: redis::Value) -> redis::RedisResult<T> {
    Ok(redis::from_redis_value(value.extract_error()?)?)
}

/// How often [`follow_promotion`] asks whether the lost slot has a master again.
const PROMOTION_POLL: Duration = Duration::from_millis(20);

/// How long [`follow_promotion`] keeps asking (a failover takes seconds; past this the
/// breaker's own cool-down is the only path back).
const PROMOTION_WAIT: Duration = Duration::from_secs(60);

/// Whether `e` says the node of the call is gone (its connection lost, refused or unknown).
pub(super) fn node_lost(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.kind() == ErrorKind::ClusterConnectionNotFound
}

/// After a call lost the node of `cmd`'s slot: asks that slot's master whether the key
/// exists every [`PROMOTION_POLL`] (each failed ask makes the client refresh its slot map)
/// until the slot's owner answers, that is until the client routes the slot to a promoted
/// replica; then lets the
/// breaker probe at once. The breaker is the store's, across every slot: opened by the dead
/// master's calls, it would otherwise hold every call off for its whole cool-down after
/// the promotion.
pub(super) async fn follow_promotion(
    mut connection: ClusterConnection,
    cmd: redis::Cmd,
    breaker: std::sync::Arc<crate::breaker::Breaker>,
) {
    // `FCALL <function> <numkeys> <key> ...`: the first key's slot, at its master.
    let Some(redis::Arg::Simple(key)) = cmd.args_iter().nth(3) else {
        return;
    };
    let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
        redis::cluster_routing::Route::with_key(key, redis::cluster_routing::SlotAddr::Master),
    ));
    let tries = PROMOTION_WAIT.as_millis() / PROMOTION_POLL.as_millis();
    // `EXISTS` of the key, not `PING`: a client with no connection for the slot sends a
    // command to any node, which answers PING but redirects a key it does not own.
    let mut exists = redis::cmd("EXISTS");
    exists.arg(key);
    for _ in 0..tries {
        tokio::time::sleep(PROMOTION_POLL).await;
        let owned = connection.route_command(exists.clone(), to.clone()).await;
        if owned.and_then(typed::<i64>).is_ok() {
            tracing::info!("redis-cluster: the lost slot answers again; the breaker may probe");
            breaker.probe_now();
            return;
        }
    }
}
