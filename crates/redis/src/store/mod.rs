//! The Redis store: one script call per decision, a deadline on every call, a circuit
//! breaker in front, and layered decisions across Cluster slots by reserve-then-refund.
//!
//! One concept a file: what the store is told (`config`) and how it fails (`error`); the
//! client and its connection (`connection`); the master behind Sentinel (`sentinel`); a
//! Cluster call's resending (`cluster`); the Lua library (`library`); the script calls
//! and the Cluster's reserve-then-refund (`call`); calls coalesced into batches (`batch`); the breaker and the deadline (`guard`);
//! permits (`permit`); and the `AsyncStore` interface (`as_store`).

mod as_store;
mod batch;
mod call;
mod cluster;
mod config;
mod connection;
mod error;
mod guard;
mod lease;
mod library;
mod permit;
mod sentinel;
mod take;

pub use config::{RedisConfig, SentinelTarget, Target, TimeSource};
pub use error::RedisError;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use ratewarden_core::Limit;
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;

use crate::breaker::{Breaker, BreakerState};
use crate::encode;
use batch::Batching;
use call::Mode;
use connection::{Client, Connection};
use library::LIBRARY;

/// Limiter state in Redis, shared by every process that uses the same Redis.
pub struct RedisStore {
    config: RedisConfig,
    client: Client,
    /// The library's function, for `FCALL`.
    function: &'static str,
    connection: OnceCell<Connection>,
    /// The connection of calls that wait for replicas, on one server (`connection.rs`).
    waited: OnceCell<redis::aio::ConnectionManager>,
    /// The connection's handshake while it runs (see `connection.rs`).
    handshake: tokio::sync::Mutex<Option<JoinHandle<Result<Connection, RedisError>>>>,
    breaker: Arc<Breaker>,
    /// See [`RedisStore::late_timeouts`].
    late_timeouts: AtomicU64,
    /// Held across each call when `pipeline` is off.
    one_at_a_time: tokio::sync::Mutex<()>,
    /// Whether a task follows a Cluster failover (see `cluster::follow_promotion`).
    following_promotion: Arc<AtomicBool>,
    /// Calls coalesced while one is in flight (`batch.rs`); none when batching is off.
    batching: Option<Arc<Batching>>,
}

impl RedisStore {
    /// A store for `config`; it connects on first use (so a process can start while Redis
    /// is down, and its rules' failure policies answer until Redis is back).
    ///
    /// # Errors
    ///
    /// A URL that cannot be a Redis address.
    pub fn new(config: RedisConfig) -> Result<Self, RedisError> {
        let breaker = Arc::new(Breaker::new(
            config.breaker_failures,
            config.breaker_cool_down,
        ));
        let client = Client::new(&config, &breaker)?;
        let batching = Batching::new(
            config.batch_in_flight,
            if config.pipeline {
                config.batch_calls
            } else {
                0
            },
            config.batch_bytes,
            crate::deadline::longest_wait(config.deadline),
            matches!(config.target, Target::Cluster(_)),
            LIBRARY.function.as_str(),
        );
        Ok(Self {
            batching,
            breaker,
            config,
            client,
            function: LIBRARY.function.as_str(),
            connection: OnceCell::new(),
            waited: OnceCell::new(),
            handshake: tokio::sync::Mutex::new(None),
            late_timeouts: AtomicU64::new(0),
            one_at_a_time: tokio::sync::Mutex::new(()),
            following_promotion: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The Redis Function the store calls (for `FCALL <function> <numkeys> <keys> <args>`)
    /// and the source of its library (for `FUNCTION LOAD REPLACE`). Both names carry a hash
    /// of the code.
    pub fn script() -> (&'static str, &'static str) {
        (LIBRARY.function.as_str(), LIBRARY.source.as_str())
    }

    /// The key and the arguments of one decision of `cost` under `limit` for `key`, on
    /// Redis's clock, in the general form (the one every mode and any number of checks
    /// take): what a tool such as `redis-benchmark` sends after `FCALL <function> 1` (see
    /// [`RedisStore::script`]) to measure the function alone. The store sends a one-check form
    /// for one check when it can: see [`RedisStore::one_check_command`].
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

    /// The key and the arguments after `FCALL <function> 1` of one decision of `cost` under
    /// `limit` for `key`, on Redis's clock, in the compact form of one check (mode
    /// `decide1`, whose reply is the decision's five values) for the algorithms the
    /// script's fast path knows, else the general form of [`RedisStore::decide_command`].
    /// The store sends it for the algorithms the one-check form ([`RedisStore::one_check_command`])
    /// does not cover; the script decides a one-check call it declines by it.
    pub fn sent_command(
        &self,
        limit: &Limit,
        key: &str,
        cost: u64,
        now_hint: u64,
    ) -> (String, Vec<String>) {
        let check = [(limit, key, i128::from(cost))];
        match self.compact(Mode::Decide, &check, now_hint) {
            Some(compact) => {
                // On Redis's clock whatever this store's time source: `now_hint` only
                // places a quota's periods, as in `decide_command`.
                let compact = call::Compact {
                    now: None,
                    ..compact
                };
                (self.redis_key(key), compact.strings())
            }
            None => self.decide_command(limit, key, cost, now_hint),
        }
    }

    /// The key and the arguments after `FCALL <function> 1` of one decision of `cost` under
    /// `limit` for `key` on Redis's clock, as the store sends it: the one-check form for the
    /// algorithms it covers (see `src/lua/one_check.lua`), else the compact or the general form
    /// of [`RedisStore::sent_command`]: what `redis-benchmark` sends to measure the function
    /// as the store calls it. Its reply is the state the script read and its `now`, which
    /// the store decides on with the core's transition.
    pub fn one_check_command(
        &self,
        limit: &Limit,
        key: &str,
        cost: u64,
        now_hint: u64,
    ) -> (String, Vec<String>) {
        match encode::one_check_spec(true, cost, limit, now_hint) {
            Some(spec) => (self.redis_key(key), vec![spec]),
            None => self.sent_command(limit, key, cost, now_hint),
        }
    }

    /// Connects and loads the library now, rather than on the first call: for a store a
    /// WAN away, whose handshake (several round trips) would outlast the first calls'
    /// deadline. Waits for the handshake however long it takes; a call made meanwhile
    /// waits on the same handshake, up to its own deadline.
    ///
    /// # Errors
    ///
    /// Why the handshake failed (the next call begins another).
    pub async fn connect(&self) -> Result<(), RedisError> {
        self.connection().await.map(drop)
    }

    /// Where the circuit breaker stands.
    pub fn breaker(&self) -> BreakerState {
        self.breaker.state()
    }

    /// The Redis key of an engine key. Everything after the first `|` (the key parts: the
    /// client's address, API key digest, tenant) is the hash tag, so rules keyed by the same
    /// parts share a Cluster slot and are decided in one script.
    fn redis_key(&self, key: &str) -> String {
        // Pushed, not `format!`ed: made for every decision.
        let prefix = &self.config.key_prefix;
        let mut redis_key = String::with_capacity(prefix.len() + key.len() + 2);
        redis_key.push_str(prefix);
        match key.split_once('|') {
            Some((rule, parts)) if !parts.is_empty() => {
                redis_key.push_str(rule);
                redis_key.push_str("|{");
                redis_key.push_str(parts);
                redis_key.push('}');
            }
            _ => redis_key.push_str(key),
        }
        redis_key
    }

    /// The `now` argument: the caller's time, or none (empty) for Redis's own clock.
    fn caller_time(&self, now: u64) -> Option<u64> {
        match self.config.time {
            TimeSource::Redis => None,
            TimeSource::Caller => Some(now),
        }
    }

    fn time_arg(&self, now: u64) -> String {
        self.caller_time(now)
            .map_or_else(String::new, |now| now.to_string())
    }
}
