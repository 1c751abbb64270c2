//! The Redis store: one script call per decision, a deadline on every call, a circuit
//! breaker in front, and layered decisions across Cluster slots by reserve-then-refund.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ratewarden_core::{AsyncStore, Check, Decision, Limit};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use tokio::sync::OnceCell;

use crate::breaker::{Breaker, BreakerState};
use crate::deadline::{self, Blame};
use crate::{encode, slot};

/// The code: the big-integer library, then the transitions (whose last statement returns the
/// entry point).
const SCRIPT: &str = concat!(
    include_str!("lua/bigint.lua"),
    "\n",
    include_str!("lua/store.lua")
);

/// The Redis Function library that runs [`SCRIPT`]: loaded once per server with
/// `FUNCTION LOAD REPLACE`, called with `FCALL`. Its names carry a hash of the code, so two
/// versions of ratewarden sharing one Redis never call each other's code.
struct Library {
    /// The function's name, for `FCALL`.
    function: String,
    /// The library's source, for `FUNCTION LOAD`.
    source: String,
}

static LIBRARY: std::sync::LazyLock<Library> = std::sync::LazyLock::new(|| {
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

/// Where the counters live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One Redis server (or a primary with replicas behind a stable address), such as
    /// `redis://127.0.0.1:6379` or `rediss://user:password@host:6380` for TLS with AUTH.
    Single(String),
    /// A Redis Cluster, found through these seed nodes.
    Cluster(Vec<String>),
}

/// Whose clock decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSource {
    /// Redis's `TIME`, read inside the script: every server of a fleet decides on one
    /// clock, however skewed their own are.
    Redis,
    /// The `now` each call is given: for deterministic tests, and differential runs against
    /// the in-memory store.
    Caller,
}

/// How to reach Redis and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// Where the counters live.
    pub target: Target,
    /// The most one call may take, connecting included; past it the call fails and the
    /// rule's failure policy answers. A deadline missed because this process was saturated
    /// (its timer fired more than half the deadline late) is not counted against Redis: the
    /// call waits on for the reply it already asked for, up to four deadlines more.
    pub deadline: Duration,
    /// Consecutive failures that open the circuit breaker.
    pub breaker_failures: u32,
    /// How long an open breaker fails calls at once before one probes again.
    pub breaker_cool_down: Duration,
    /// Whose clock decides.
    pub time: TimeSource,
    /// Put before every key, so several deployments can share one Redis.
    pub key_prefix: String,
    /// For `rediss://` URLs: trust this CA certificate (PEM) instead of the system's.
    pub tls_ca: Option<Vec<u8>>,
    /// Concurrent calls share the connection and are pipelined (the default). Off, calls
    /// wait for each other, one round trip at a time: only for measuring what pipelining
    /// is worth.
    pub pipeline: bool,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            target: Target::Single("redis://127.0.0.1:6379".to_owned()),
            deadline: ratewarden_core::shared_store::DEADLINE,
            breaker_failures: ratewarden_core::shared_store::BREAKER_FAILURES,
            breaker_cool_down: ratewarden_core::shared_store::BREAKER_COOL_DOWN,
            time: TimeSource::Redis,
            key_prefix: ratewarden_core::shared_store::KEY_PREFIX.to_owned(),
            tls_ca: None,
            pipeline: true,
        }
    }
}

/// Why a call to Redis failed.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// No answer within the deadline.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The circuit breaker is open: Redis failed repeatedly, and is not asked again until
    /// the cool-down is over.
    #[error("redis failed repeatedly; the circuit breaker is open until its cool-down is over")]
    BreakerOpen,
    /// The client or the server reported an error.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The script answered something this build does not understand.
    #[error("unexpected reply from the ratewarden script: {0}")]
    Protocol(String),
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Limiter state in Redis, shared by every process that uses the same Redis.
pub struct RedisStore {
    config: RedisConfig,
    client: Client,
    /// The library's function, for `FCALL`.
    function: &'static str,
    connection: OnceCell<Connection>,
    breaker: Breaker,
    /// See [`RedisStore::late_timeouts`].
    late_timeouts: AtomicU64,
    /// Held across each call when `pipeline` is off.
    one_at_a_time: tokio::sync::Mutex<()>,
}

/// Made once per store; boxed because the clients are large with TLS.
enum Client {
    Single(Box<redis::Client>),
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl RedisStore {
    /// A store for `config`; it connects on first use (so a process can start while Redis
    /// is down, and its rules' failure policies answer until Redis is back).
    ///
    /// # Errors
    ///
    /// A URL that cannot be a Redis address.
    pub fn new(config: RedisConfig) -> Result<Self, RedisError> {
        let certificates = || redis::TlsCertificates {
            client_tls: None,
            root_cert: config.tls_ca.clone(),
        };
        let client = match &config.target {
            Target::Single(url) if config.tls_ca.is_some() => Client::Single(Box::new(
                redis::Client::build_with_tls(url.as_str(), certificates())?,
            )),
            Target::Single(url) => Client::Single(Box::new(redis::Client::open(url.as_str())?)),
            Target::Cluster(nodes) => {
                let mut builder =
                    redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str));
                if config.tls_ca.is_some() {
                    builder = builder.certs(certificates());
                }
                Client::Cluster(Box::new(builder.build()?))
            }
        };
        Ok(Self {
            breaker: Breaker::new(config.breaker_failures, config.breaker_cool_down),
            config,
            client,
            function: LIBRARY.function.as_str(),
            connection: OnceCell::new(),
            late_timeouts: AtomicU64::new(0),
            one_at_a_time: tokio::sync::Mutex::new(()),
        })
    }

    /// The Redis Function the store calls (for `FCALL <function> <numkeys> <keys> <args>`)
    /// and the source of its library (for `FUNCTION LOAD REPLACE`). Both names carry a hash
    /// of the code.
    pub fn script() -> (&'static str, &'static str) {
        (LIBRARY.function.as_str(), LIBRARY.source.as_str())
    }

    /// The key and the arguments of one decision of `cost` under `limit` for `key`, on
    /// Redis's clock: what a tool such as `redis-benchmark` sends after
    /// `FCALL <function> 1` (see [`RedisStore::script`]) to measure the function alone.
    pub fn decide_command(
        &self,
        limit: &Limit,
        key: &str,
        cost: u64,
        now_hint: u64,
    ) -> (String, Vec<String>) {
        let mut args = vec![
            Mode::Decide.as_str().to_owned(),
            String::new(),
            "1".to_owned(),
        ];
        encode::push_check(&mut args, limit, &cost.to_string(), now_hint);
        (self.redis_key(key), args)
    }

    /// Where the circuit breaker stands.
    pub fn breaker(&self) -> BreakerState {
        self.breaker.state()
    }

    async fn connection(&self) -> Result<Connection, RedisError> {
        let connection = self
            .connection
            .get_or_try_init(|| async {
                let mut connection = match &self.client {
                    Client::Single(client) => {
                        // The deadline (`deadline.rs`) is the one clock on a reply: it
                        // tells a slow Redis from a saturated caller. The manager's own
                        // 500 ms default would fail a saturated caller's calls as Redis's
                        // fault, a deadline of seconds included.
                        let config = ConnectionManagerConfig::new().set_response_timeout(None);
                        Connection::Single(
                            ConnectionManager::new_with_config((**client).clone(), config).await?,
                        )
                    }
                    Client::Cluster(client) => {
                        Connection::Cluster(client.get_async_connection().await?)
                    }
                };
                // Load the library up front, so the first decision need not find it missing.
                // (A server restarted, flushed or failed over later gets it on a call that
                // finds it missing: see `invoke`.)
                Self::load(&mut connection).await?;
                Ok::<_, RedisError>(connection)
            })
            .await?;
        Ok(connection.clone())
    }

    /// The Redis key of an engine key. Everything after the first `|` (the key parts: the
    /// client's address, API key digest, tenant) is the hash tag, so rules keyed by the same
    /// parts share a Cluster slot and are decided in one script.
    fn redis_key(&self, key: &str) -> String {
        let prefix = &self.config.key_prefix;
        match key.split_once('|') {
            Some((rule, parts)) if !parts.is_empty() => format!("{prefix}{rule}|{{{parts}}}"),
            _ => format!("{prefix}{key}"),
        }
    }

    /// Runs `mode` over `checks` (`cost` is the delta for `settle`) behind the breaker and
    /// within the deadline.
    async fn run(
        &self,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        now: u64,
    ) -> Result<Vec<Decision>, RedisError> {
        self.guarded(self.call(mode, checks, now)).await
    }

    async fn call(
        &self,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        now: u64,
    ) -> Result<Vec<Decision>, RedisError> {
        let keys: Vec<String> = checks
            .iter()
            .map(|(_, key, _)| self.redis_key(key))
            .collect();
        // One script when the keys can go together: always on one server, and on a Cluster
        // when they share a slot.
        let groups: Vec<Vec<usize>> = match &self.client {
            Client::Single(_) => vec![(0..checks.len()).collect()],
            Client::Cluster(_) => {
                let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
                for (i, key) in keys.iter().enumerate() {
                    let s = slot::slot(key.as_bytes());
                    match groups.iter_mut().find(|(g, _)| *g == s) {
                        Some((_, members)) => members.push(i),
                        None => groups.push((s, vec![i])),
                    }
                }
                groups.into_iter().map(|(_, members)| members).collect()
            }
        };
        let mut connection = self.connection().await?;
        if groups.len() <= 1 {
            return self
                .script_call(&mut connection, mode, checks, &keys, now)
                .await;
        }
        // Across slots a layered decision cannot be one script: reserve in each slot, and
        // if any slot says no, refund the slots that charged. Worst case, while a refund is
        // on its way, other requests see those keys short by this request's cost: the
        // error is always towards rejecting, never towards admitting more than the limit.
        let mut decisions = vec![None; checks.len()];
        let mut charged: Vec<&Vec<usize>> = Vec::new();
        let mut all_allowed = true;
        for group in &groups {
            let group_checks: Vec<(&Limit, &str, i128)> =
                group.iter().map(|&i| checks[i]).collect();
            let group_keys: Vec<String> = group.iter().map(|&i| keys[i].clone()).collect();
            let got = self
                .script_call(&mut connection, mode, &group_checks, &group_keys, now)
                .await?;
            let allowed = got.iter().all(Decision::is_allowed);
            for (&i, d) in group.iter().zip(got) {
                decisions[i] = Some(d);
            }
            if mode == Mode::Decide {
                if allowed {
                    charged.push(group);
                } else {
                    all_allowed = false;
                }
            }
        }
        if mode == Mode::Decide && !all_allowed {
            for group in charged {
                let refund: Vec<(&Limit, &str, i128)> = group
                    .iter()
                    .map(|&i| (checks[i].0, checks[i].1, -checks[i].2))
                    .collect();
                let refund_keys: Vec<String> = group.iter().map(|&i| keys[i].clone()).collect();
                self.script_call(&mut connection, Mode::Settle, &refund, &refund_keys, now)
                    .await?;
            }
        }
        decisions
            .into_iter()
            .map(|d| d.ok_or_else(|| RedisError::Protocol("a check went undecided".to_owned())))
            .collect()
    }

    async fn script_call(
        &self,
        connection: &mut Connection,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        keys: &[String],
        now: u64,
    ) -> Result<Vec<Decision>, RedisError> {
        let mut args: Vec<String> = Vec::with_capacity(3 + checks.len() * 8);
        args.push(mode.as_str().to_owned());
        args.push(self.time_arg(now));
        args.push(checks.len().to_string());
        for (limit, _, cost) in checks {
            encode::push_check(&mut args, limit, &cost.to_string(), now);
        }
        let reply = self.invoke(connection, keys, &args).await?;
        let (_now, decisions) = encode::decode(&reply).map_err(RedisError::Protocol)?;
        if decisions.len() != checks.len() {
            return Err(RedisError::Protocol(format!(
                "{} decisions for {} checks",
                decisions.len(),
                checks.len()
            )));
        }
        Ok(decisions)
    }
}

impl RedisStore {
    /// One call of the function: keys and arguments in, the flat string reply out. A server
    /// without the library (new, restarted, flushed, or a replica promoted before it had it)
    /// gets it loaded, and the call is made once more.
    async fn invoke(
        &self,
        connection: &mut Connection,
        keys: &[String],
        args: &[String],
    ) -> Result<Vec<String>, RedisError> {
        let mut fcall = redis::cmd("FCALL");
        fcall.arg(self.function).arg(keys.len()).arg(keys).arg(args);
        let _turn = if self.config.pipeline {
            None
        } else {
            Some(self.one_at_a_time.lock().await)
        };
        match Self::query(connection, &fcall).await {
            Err(RedisError::Redis(e)) if Self::function_missing(&e) => {
                Self::load(connection).await?;
                Self::query(connection, &fcall).await
            }
            reply => reply,
        }
    }

    async fn query<T: redis::FromRedisValue>(
        connection: &mut Connection,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisError> {
        Ok(match connection {
            Connection::Single(c) => cmd.query_async(c).await?,
            Connection::Cluster(c) => cmd.query_async(c).await?,
        })
    }

    /// `FUNCTION LOAD REPLACE` of the library: on a Cluster, the client sends it to every
    /// primary. Replacing is safe: a library's name is a hash of its code, so whatever
    /// holds the name holds this code.
    async fn load(connection: &mut Connection) -> Result<(), RedisError> {
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

    /// Behind the breaker and within the deadline, with the connection.
    ///
    /// A deadline missed while the caller was saturated (its timer fired late, see
    /// [`deadline`](crate::deadline)) fails the call but is not held against Redis.
    async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, RedisError> {
        if !self.breaker.allow() {
            return Err(RedisError::BreakerOpen);
        }
        let deadline = self.config.deadline;
        match deadline::within(deadline, call).await {
            Ok(Ok(value)) => {
                self.breaker.succeeded();
                Ok(value)
            }
            Ok(Err(error)) => {
                self.breaker.failed();
                Err(error)
            }
            Err(Blame::Redis) => {
                self.breaker.failed();
                Err(RedisError::Timeout(deadline))
            }
            Err(Blame::Caller) => {
                self.late_timeouts.fetch_add(1, Ordering::Relaxed);
                self.breaker.inconclusive();
                Err(RedisError::Timeout(deadline))
            }
        }
    }

    /// Calls that timed out because this process was saturated (every timer of the call
    /// fired late), not held against Redis by the circuit breaker. For metrics: a count
    /// that grows means the process, not Redis, needs capacity.
    pub fn late_timeouts(&self) -> u64 {
        self.late_timeouts.load(Ordering::Relaxed)
    }

    fn time_arg(&self, now: u64) -> String {
        match self.config.time {
            TimeSource::Redis => String::new(),
            TimeSource::Caller => now.to_string(),
        }
    }

    /// Takes a concurrency permit of `cost` units for `key` under `id` (a non-zero id
    /// unique to the holder: zero is the anonymous holder of settled units): `Ok(Ok(()))`
    /// when granted, the decision when not. Under a limit that is not a concurrency limit
    /// this is a decision.
    ///
    /// # Errors
    ///
    /// Redis failed, was too slow, or the breaker is open.
    pub async fn acquire(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
        id: u64,
    ) -> Result<Result<(), Decision>, RedisError> {
        self.guarded(async {
            let mut connection = self.connection().await?;
            let mut args = vec!["acquire".to_owned(), self.time_arg(now), "1".to_owned()];
            args.push(id.to_string());
            encode::push_check(&mut args, limit, &cost.to_string(), now);
            let reply = self
                .invoke(&mut connection, &[self.redis_key(key)], &args)
                .await?;
            let (_, mut decisions) = encode::decode(&reply).map_err(RedisError::Protocol)?;
            let decision = decisions
                .pop()
                .ok_or_else(|| RedisError::Protocol("no decision".to_owned()))?;
            Ok(if decision.is_allowed() {
                Ok(())
            } else {
                Err(decision)
            })
        })
        .await
    }

    /// Gives back permit `id` of `key`; false if it was not held (released, or lapsed).
    ///
    /// # Errors
    ///
    /// Redis failed, was too slow, or the breaker is open.
    pub async fn release(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        id: u64,
    ) -> Result<bool, RedisError> {
        self.guarded(async {
            let mut connection = self.connection().await?;
            let mut args = vec!["release".to_owned(), self.time_arg(now), "1".to_owned()];
            args.push(id.to_string());
            encode::push_check(&mut args, limit, "0", now);
            let reply = self
                .invoke(&mut connection, &[self.redis_key(key)], &args)
                .await?;
            match reply.get(1).map(String::as_str) {
                Some("1") => Ok(true),
                Some("0") => Ok(false),
                other => Err(RedisError::Protocol(format!("release answered {other:?}"))),
            }
        })
        .await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Decide,
    Peek,
    Settle,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Decide => "decide",
            Mode::Peek => "peek",
            Mode::Settle => "settle",
        }
    }
}

impl AsyncStore for RedisStore {
    type Error = RedisError;

    fn is_shared(&self) -> bool {
        true
    }

    async fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, RedisError> {
        let mut d = self
            .run(Mode::Decide, &[(limit, key, i128::from(cost))], now)
            .await?;
        d.pop()
            .ok_or_else(|| RedisError::Protocol("no decision".to_owned()))
    }

    async fn decide_all(
        &self,
        checks: &[Check<'_>],
        now: u64,
    ) -> Result<Vec<Decision>, RedisError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let checks: Vec<(&Limit, &str, i128)> = checks
            .iter()
            .map(|c| (c.limit, c.key, i128::from(c.cost)))
            .collect();
        self.run(Mode::Decide, &checks, now).await
    }

    async fn peek(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, RedisError> {
        let mut d = self
            .run(Mode::Peek, &[(limit, key, i128::from(cost))], now)
            .await?;
        d.pop()
            .ok_or_else(|| RedisError::Protocol("no decision".to_owned()))
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        delta: i64,
    ) -> Result<(), RedisError> {
        self.run(Mode::Settle, &[(limit, key, i128::from(delta))], now)
            .await
            .map(drop)
    }
}
