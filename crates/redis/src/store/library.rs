//! The Lua code as a Redis Function library: loaded once per server, called with `FCALL`,
//! loaded again on a server that lost it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use redis::cluster_async::ClusterConnection;

use super::connection::Connection;
use super::{RedisError, RedisStore};

/// The code: Redis's clock as a batch holds it, the big-integer library, the fast path in
/// doubles, the one-check call, the fleet's leased shares, then the transitions (whose last
/// statement returns the entry point).
const SCRIPT: &str = concat!(
    include_str!("../lua/time.lua"),
    "\n",
    include_str!("../lua/bigint.lua"),
    "\n",
    include_str!("../lua/fast.lua"),
    "\n",
    include_str!("../lua/one_check.lua"),
    "\n",
    include_str!("../lua/lease.lua"),
    "\n",
    include_str!("../lua/store.lua")
);

/// The Redis Function library that runs [`SCRIPT`]: loaded once per server with
/// `FUNCTION LOAD REPLACE`, called with `FCALL`. Its names carry a hash of the code, so two
/// versions of ratewarden sharing one Redis never call each other's code.
pub(super) struct Library {
    /// The function's name, for `FCALL`.
    pub(super) function: String,
    /// The library's source, for `FUNCTION LOAD`.
    pub(super) source: String,
}

pub(super) static LIBRARY: std::sync::LazyLock<Library> = std::sync::LazyLock::new(|| {
    let hash = redis::Script::new(SCRIPT).get_hash().to_owned();
    let version = &hash[..16];
    let function = format!("ratewarden_store_{version}");
    // Redis 7 hides the Lua standard library while a library loads (only
    // `redis.register_function` and a few others are there), so the code runs on the first
    // call, once per server (and again after each FUNCTION LOAD).
    let source = format!(
        "#!lua name=ratewarden_{version}\n\
         local function load()\n{SCRIPT}\nend\n\
         local main\n\
         redis.register_function('{function}', function(keys, args)\n\
         \x20 if main == nil then main = load() end\n\
         \x20 return main(keys, args)\n\
         end)\n"
    );
    Library { function, source }
});

/// `FUNCTION LOAD REPLACE` of the library.
pub(super) fn load_command() -> redis::Cmd {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg("REPLACE").arg(LIBRARY.source.as_str());
    load
}

impl RedisStore {
    /// One call of the function: keys and arguments in, the reply out (a flat array of
    /// strings, or one string from the compact call of one check). A server without the
    /// library (new, restarted, flushed, or a replica promoted before it had it) gets it
    /// loaded, and the call is made once more.
    /// `replicas` as [`RedisStore::send`] takes it.
    pub(super) async fn invoke<T: redis::FromRedisValue>(
        &self,
        connection: &mut Connection,
        keys: &[String],
        args: &[String],
        replicas: u32,
    ) -> Result<T, RedisError> {
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(self.function).arg(keys.len()).arg(keys).arg(args);
        self.send(connection, &fcall, replicas).await
    }

    /// Sends `fcall` (a whole `FCALL` of the library's function), loading the library
    /// first where the server lacks it, as [`RedisStore::invoke`] says; answered once
    /// `replicas` replicas hold it (and `wait_for_replicas`, whichever is more).
    pub(super) async fn send<T: redis::FromRedisValue>(
        &self,
        connection: &mut Connection,
        fcall: &redis::Cmd,
        replicas: u32,
    ) -> Result<T, RedisError> {
        let _turn = if self.config.pipeline {
            None
        } else {
            Some(self.one_at_a_time.lock().await)
        };
        match self.query_replicated(connection, fcall, replicas).await {
            Err(RedisError::Redis(e)) if Self::function_missing(&e) => {
                Self::load(connection).await?;
                self.query_replicated(connection, fcall, replicas).await
            }
            Err(RedisError::Redis(e)) if super::cluster::node_lost(&e) => {
                if let Connection::Cluster(c) = connection {
                    self.follow_promotion(c, fcall);
                }
                Err(RedisError::Redis(e))
            }
            reply => reply,
        }
    }

    /// Starts [`follow_promotion`](super::cluster::follow_promotion) for `fcall`'s slot,
    /// unless one already runs.
    fn follow_promotion(&self, connection: &ClusterConnection, fcall: &redis::Cmd) {
        if self.following_promotion.swap(true, Ordering::AcqRel) {
            return;
        }
        let (connection, fcall, breaker) =
            (connection.clone(), fcall.clone(), Arc::clone(&self.breaker));
        let following = Arc::clone(&self.following_promotion);
        tokio::spawn(async move {
            super::cluster::follow_promotion(connection, fcall, breaker).await;
            following.store(false, Ordering::Release);
        });
    }

    /// Sends `fcall`, followed on the same connection by `WAIT` for `replicas` replicas
    /// (at least [`RedisConfig::wait_for_replicas`](super::RedisConfig::wait_for_replicas))
    /// when that is above zero: the decision counts only once they hold it.
    ///
    /// A waited call goes on a connection of its own: Redis holds a client's later commands
    /// while its `WAIT` blocks, so on the connection every other call shares, one rule's
    /// wait would be every rule's.
    async fn query_replicated<T: redis::FromRedisValue>(
        &self,
        connection: &mut Connection,
        fcall: &redis::Cmd,
        replicas: u32,
    ) -> Result<T, RedisError> {
        let wanted = self.config.wait_for_replicas.max(replicas);
        if wanted == 0 {
            return self.coalesced(connection, fcall).await;
        }
        // WAIT's timeout is in whole milliseconds, and 0 would wait for ever: half the
        // deadline, at least 1 ms, so that replicas late to acknowledge answer "not
        // replicated" (the master is fine) before the deadline calls Redis slow.
        let timeout = u64::try_from((self.config.deadline / 2).as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut pipeline = redis::pipe();
        pipeline
            .add_command(fcall.clone())
            .cmd("WAIT")
            .arg(wanted)
            .arg(timeout);
        let (reply, acknowledged): (T, u32) = match connection {
            Connection::Single(_) => pipeline.query_async(&mut self.waited().await?).await?,
            Connection::Sentinel(s) => s.query_waited(&pipeline).await?,
            Connection::Cluster(_) => {
                return Err(RedisError::Protocol(
                    "wait_for_replicas applies to one server or Sentinel, not a Cluster".to_owned(),
                ))
            }
        };
        if acknowledged < wanted {
            return Err(RedisError::NotReplicated {
                acknowledged,
                wanted,
            });
        }
        Ok(reply)
    }

    /// `FUNCTION LOAD REPLACE` of the library: on a Cluster, the client sends it to every
    /// primary. Replacing is safe: a library's name is a hash of its code, so whatever
    /// holds the name holds this code.
    pub(super) async fn load(connection: &mut Connection) -> Result<(), RedisError> {
        let _name: redis::Value = Self::query(connection, &load_command()).await?;
        Ok(())
    }

    /// Whether `FCALL` failed because this server does not have the library.
    pub(super) fn function_missing(e: &redis::RedisError) -> bool {
        e.detail()
            .is_some_and(|d| d.starts_with("Function not found"))
            // Within a pipeline (`wait_for_replicas`) the error is the pipeline's, which
            // names its commands' errors in its message.
            || (e.detail().is_none() && e.to_string().contains("Function not found"))
    }
}
