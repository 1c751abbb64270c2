//! A master found through Redis Sentinel, and followed when Sentinel promotes another.
//!
//! The Sentinels are asked for the master with redis-rs's `SentinelClient` (`SENTINEL
//! MASTERS`, then `ROLE` on the address named). Calls go to that master over one multiplexed
//! connection until they learn it is gone: the connection drops or is refused, or the server
//! answers `READONLY` (a master demoted to replica). Then the connection is forgotten, calls
//! fail at once (each rule's failure policy answers), and a task asks the Sentinels again
//! every [`RETRY`] until one names a master that answers as one, loads the library there and
//! hands calls the new connection. Sentinel's `+switch-master` message, watched on every
//! Sentinel, wakes that task at once, so a master cut off from us but still alive is left
//! as soon as the Sentinels promote another.

use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, IntoConnectionInfo, ProtocolVersion, PushKind};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{RedisError, SentinelTarget};
use crate::breaker::Breaker;

/// How often the Sentinels are asked again while no master is known.
const RETRY: Duration = Duration::from_millis(50);

/// How long a lost `+switch-master` watch waits before it connects again.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// The master of one Sentinel-monitored name, as calls see it.
pub(super) struct Sentinel {
    master_name: String,
    client: tokio::sync::Mutex<SentinelClient>,
    /// The Sentinels' addresses, for the `+switch-master` watches.
    sentinels: Vec<redis::ConnectionInfo>,
    /// The master now: its address and connection, until a call finds it gone.
    master: RwLock<Option<Master>>,
    /// Wakes the task that asks the Sentinels (a call lost the master, or a Sentinel said
    /// `+switch-master`).
    wake: Arc<Notify>,
    /// The store's breaker: a new master lets a call probe at once rather than after the
    /// cool-down, so decisions resume as soon as the master is found.
    breaker: Arc<Breaker>,
    /// The client's own connect timeout (see `connection.rs`).
    connect_timeout: Duration,
    /// The finding task and the watches, started with the first connection, ended with the
    /// store.
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Clone)]
struct Master {
    address: String,
    connection: MultiplexedConnection,
    /// For the calls that wait for replicas (`query_waited`).
    waited: MultiplexedConnection,
}

impl Sentinel {
    /// The Sentinel client for `target`, trusting `tls_ca` where TLS is spoken.
    pub(super) fn new(
        target: &SentinelTarget,
        tls_ca: Option<&[u8]>,
        breaker: Arc<Breaker>,
        connect_timeout: Duration,
    ) -> Result<Self, RedisError> {
        let sentinels = target
            .sentinels
            .iter()
            .map(|url| url.as_str().into_connection_info())
            .collect::<Result<Vec<_>, _>>()?;
        let Some(first) = sentinels.first() else {
            return Err(RedisError::Protocol(
                "redis-sentinel: no Sentinel addresses".to_owned(),
            ));
        };
        let auth = |info: &redis::ConnectionInfo| {
            let settings = info.redis_settings();
            (
                settings.username().map(str::to_owned),
                settings.password().map(str::to_owned),
            )
        };
        let (username, password) = auth(first);
        if sentinels
            .iter()
            .any(|s| auth(s) != (username.clone(), password.clone()))
        {
            return Err(RedisError::Protocol(
                "redis-sentinel: every Sentinel URL must carry the same user and password"
                    .to_owned(),
            ));
        }
        let certificates = || redis::TlsCertificates {
            client_tls: None,
            root_cert: tls_ca.map(<[u8]>::to_vec),
        };
        let mut builder = SentinelClientBuilder::new(
            sentinels.iter().map(|s| s.addr().clone()),
            &target.master_name,
            SentinelServerType::Master,
        )?;
        if let Some(username) = &username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = &password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        let sentinel_tls = matches!(first.addr(), redis::ConnectionAddr::TcpTls { .. });
        if sentinel_tls && tls_ca.is_some() {
            builder = builder.set_client_to_sentinel_certificates(certificates());
        }
        if let Some(username) = &target.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &target.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if target.tls {
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if tls_ca.is_some() {
                builder = builder.set_client_to_redis_certificates(certificates());
            }
        }
        Ok(Self {
            master_name: target.master_name.clone(),
            client: tokio::sync::Mutex::new(builder.build()?),
            sentinels,
            master: RwLock::new(None),
            wake: Arc::new(Notify::new()),
            breaker,
            connect_timeout,
            tasks: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Finds the master (if none is known yet) and starts following it: the task that asks
    /// the Sentinels again when it is lost, and a `+switch-master` watch on every Sentinel.
    /// Called by the store's handshake; starts the tasks once.
    pub(super) async fn connect(self: &Arc<Self>) -> Result<(), RedisError> {
        {
            let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
            if tasks.is_empty() {
                tasks.push(tokio::spawn(follow(
                    Arc::downgrade(self),
                    self.wake.clone(),
                )));
                for sentinel in &self.sentinels {
                    tasks.push(tokio::spawn(watch(
                        sentinel.clone(),
                        self.master_name.clone(),
                        self.wake.clone(),
                    )));
                }
            }
        }
        if self.current().is_none() {
            self.find().await?;
        }
        Ok(())
    }

    /// Sends `cmd` to the master. A call that finds the master gone fails, and wakes the
    /// task that asks the Sentinels for the next one.
    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisError> {
        let master = self.master_now()?;
        let reply = cmd.query_async(&mut master.connection.clone()).await;
        self.check(&master, reply)
    }

    /// Sends `pipeline` (a call and its `WAIT`) to the master on the connection of waited
    /// calls, as [`Sentinel::query`] sends one command: a `WAIT` holds its connection's
    /// later commands, which must not be every other call's.
    pub(super) async fn query_waited<T: redis::FromRedisValue>(
        &self,
        pipeline: &redis::Pipeline,
    ) -> Result<T, RedisError> {
        let master = self.master_now()?;
        let reply = pipeline.query_async(&mut master.waited.clone()).await;
        self.check(&master, reply)
    }

    fn master_now(&self) -> Result<Master, RedisError> {
        self.current().ok_or_else(|| {
            self.wake.notify_one();
            RedisError::NoMaster(self.master_name.clone())
        })
    }

    fn check<T>(&self, master: &Master, reply: redis::RedisResult<T>) -> Result<T, RedisError> {
        match reply {
            Err(e) if master_gone(&e) => {
                self.forget(&master.address);
                Err(e.into())
            }
            reply => Ok(reply?),
        }
    }

    fn current(&self) -> Option<Master> {
        self.master
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets the master at `address` (and not one found since), and wakes the finder.
    fn forget(&self, address: &str) {
        let mut master = self.master.write().unwrap_or_else(PoisonError::into_inner);
        if master.as_ref().is_some_and(|m| m.address == address) {
            tracing::warn!(
                master = %self.master_name,
                address,
                "redis-sentinel: the master is gone; asking the Sentinels for the next"
            );
            *master = None;
        }
        drop(master);
        self.wake.notify_one();
    }

    /// Asks the Sentinels for the master and, if it is not the one calls use now, connects
    /// to it, loads the library there and hands it to calls.
    async fn find(&self) -> Result<(), RedisError> {
        // One asking at a time: the handshake and the finder may both ask.
        let mut client = self.client.lock().await;
        let found = client.async_get_client().await?;
        let address = found.get_connection_info().addr().to_string();
        if self.current().is_some_and(|m| m.address == address) {
            return Ok(());
        }
        // No reply timeout of the client's own: the store's deadline is the one clock on a
        // reply (see `deadline.rs`).
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(self.connect_timeout));
        let connection = found
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let waited = found
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        super::library::load_command()
            .query_async::<redis::Value>(&mut connection.clone())
            .await?;
        drop(client);
        tracing::info!(
            master = %self.master_name,
            address,
            "redis-sentinel: deciding on this master"
        );
        *self.master.write().unwrap_or_else(PoisonError::into_inner) = Some(Master {
            address,
            connection,
            waited,
        });
        self.breaker.probe_now();
        Ok(())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }
}

/// Whether `e` says the master calls use is no longer the master: its connection is gone
/// or refused, or it answers as a replica.
fn master_gone(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

/// Asks the Sentinels for the master whenever woken, and every [`RETRY`] while none is
/// known. Holds the state only while asking, so the store can be dropped.
async fn follow(sentinel: Weak<Sentinel>, wake: Arc<Notify>) {
    loop {
        let known = sentinel.upgrade().is_some_and(|s| s.current().is_some());
        if known {
            wake.notified().await;
        } else {
            let _ = tokio::time::timeout(RETRY, wake.notified()).await;
        }
        let Some(sentinel) = sentinel.upgrade() else {
            return;
        };
        if let Err(e) = sentinel.find().await {
            tracing::debug!(master = %sentinel.master_name, error = %e, "redis-sentinel: no master yet");
        }
    }
}

/// Watches one Sentinel's `+switch-master` messages for `master_name`, and wakes the finder
/// on each; connects again after a lost connection.
async fn watch(sentinel: redis::ConnectionInfo, master_name: String, wake: Arc<Notify>) {
    // Push messages on a multiplexed connection need RESP3, which Sentinel speaks.
    let settings = sentinel
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let sentinel = sentinel.set_redis_settings(settings);
    let prefix = format!("{master_name} ");
    loop {
        let (sender, mut messages) = tokio::sync::mpsc::unbounded_channel();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(WATCH_RETRY))
            .set_push_sender(sender);
        let connected = async {
            let client = redis::Client::open(sentinel.clone())?;
            let mut connection = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            connection.subscribe("+switch-master").await?;
            Ok::<_, redis::RedisError>(connection)
        }
        .await;
        if let Ok(_connection) = connected {
            while let Some(push) = messages.recv().await {
                match push.kind {
                    PushKind::Message => {
                        let payload = push.data.into_iter().nth(1);
                        let payload: Option<String> =
                            payload.and_then(|p| redis::from_redis_value(p).ok());
                        if payload.is_some_and(|p| p.starts_with(&prefix)) {
                            tracing::info!(master = %master_name, "redis-sentinel: +switch-master");
                            wake.notify_one();
                        }
                    }
                    PushKind::Disconnection => break,
                    _ => {}
                }
            }
        }
        tokio::time::sleep(WATCH_RETRY).await;
    }
}
