//! The Lua code as a Redis Function library: loaded once per server, called with `FCALL`,
//! loaded again on a server that lost it.

use super::connection::Connection;
use super::{RedisError, RedisStore};

/// The code: the big-integer library, the fast path in doubles, the lean call, then the
/// transitions (whose last statement returns the entry point).
const SCRIPT: &str = concat!(
    include_str!("../lua/bigint.lua"),
    "\n",
    include_str!("../lua/fast.lua"),
    "\n",
    include_str!("../lua/lean.lua"),
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

impl RedisStore {
    /// One call of the function: keys and arguments in, the reply out (a flat array of
    /// strings, or one string from the compact call of one check). A server without the
    /// library (new, restarted, flushed, or a replica promoted before it had it) gets it
    /// loaded, and the call is made once more.
    pub(super) async fn invoke<T: redis::FromRedisValue>(
        &self,
        connection: &mut Connection,
        keys: &[String],
        args: &[String],
    ) -> Result<T, RedisError> {
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(self.function).arg(keys.len()).arg(keys).arg(args);
        self.send(connection, &fcall).await
    }

    /// Sends `fcall` (a whole `FCALL` of the library's function), loading the library
    /// first where the server lacks it, as [`RedisStore::invoke`] says.
    pub(super) async fn send<T: redis::FromRedisValue>(
        &self,
        connection: &mut Connection,
        fcall: &redis::Cmd,
    ) -> Result<T, RedisError> {
        let _turn = if self.config.pipeline {
            None
        } else {
            Some(self.one_at_a_time.lock().await)
        };
        match Self::query(connection, fcall).await {
            Err(RedisError::Redis(e)) if Self::function_missing(&e) => {
                Self::load(connection).await?;
                Self::query(connection, fcall).await
            }
            reply => reply,
        }
    }

    /// `FUNCTION LOAD REPLACE` of the library: on a Cluster, the client sends it to every
    /// primary. Replacing is safe: a library's name is a hash of its code, so whatever
    /// holds the name holds this code.
    pub(super) async fn load(connection: &mut Connection) -> Result<(), RedisError> {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(LIBRARY.source.as_str());
        let _name: redis::Value = Self::query(connection, &load).await?;
        Ok(())
    }

    /// Whether `FCALL` failed because this server does not have the library.
    fn function_missing(e: &redis::RedisError) -> bool {
        e.detail()
            .is_some_and(|d| d.starts_with("Function not found"))
    }
}
