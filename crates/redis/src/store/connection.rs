//! The client made once per store, and its one connection (to a server or a Cluster),
//! opened on first use with the library loaded.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

use super::sentinel::Sentinel;
use super::{RedisConfig, RedisError, RedisStore, Target};
use crate::breaker::Breaker;

/// Made once per store; boxed because the clients are large with TLS.
#[derive(Clone)]
pub(super) enum Client {
    Single(Box<redis::Client>),
    Cluster(Box<redis::cluster::ClusterClient>),
    /// The Sentinels and the master they name, shared by the client and its connection.
    Sentinel(Arc<Sentinel>),
}

impl Client {
    /// The client for `config`'s target, trusting `config`'s CA if it has one; `breaker`
    /// is told when a Sentinel names a new master.
    pub(super) fn new(config: &RedisConfig, breaker: &Arc<Breaker>) -> Result<Self, RedisError> {
        let certificates = || redis::TlsCertificates {
            client_tls: None,
            root_cert: config.tls_ca.clone(),
        };
        Ok(match &config.target {
            Target::Single(url) if config.tls_ca.is_some() => Client::Single(Box::new(
                redis::Client::build_with_tls(url.as_str(), certificates())?,
            )),
            Target::Single(url) => Client::Single(Box::new(redis::Client::open(url.as_str())?)),
            Target::Cluster(nodes) => {
                let mut builder =
                    redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                        .response_timeout(client_timeout(config.deadline, CLIENT_RESPONSE))
                        .connection_timeout(client_timeout(config.deadline, CLIENT_CONNECT))
                        // The client's own retries resend a call whose connection broke after
                        // it was written, when the script may have run: a decision charged
                        // twice. The store resends itself, only on the answers that say the
                        // script did not run (`cluster.rs`).
                        .retries(0);
                if config.tls_ca.is_some() {
                    builder = builder.certs(certificates());
                }
                Client::Cluster(Box::new(builder.build()?))
            }
            Target::Sentinel(target) => Client::Sentinel(Arc::new(Sentinel::new(
                target,
                config.tls_ca.as_deref(),
                Arc::clone(breaker),
                client_timeout(config.deadline, CLIENT_CONNECT),
            )?)),
        })
    }
}

#[derive(Clone)]
pub(super) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<Sentinel>),
}

impl RedisStore {
    /// The store's connection, made on first use: connected, and the library loaded.
    ///
    /// That handshake runs on a task of its own, which the callers wait on: loading the
    /// library takes Redis about 12 ms (it compiles the code), more than the default 10 ms
    /// deadline, and a handshake made inside a call was dropped with the call at its
    /// deadline and begun again by the next, so a store could go on failing every call
    /// against a healthy Redis until its breaker opened. A call still fails at its deadline;
    /// the handshake goes on, and the next call finds it done or nearer done.
    pub(super) async fn connection(&self) -> Result<Connection, RedisError> {
        if let Some(connection) = self.connection.get() {
            return Ok(connection.clone());
        }
        let mut pending = self.handshake.lock().await;
        if let Some(connection) = self.connection.get() {
            return Ok(connection.clone());
        }
        let client = self.client.clone();
        let deadline = self.config.deadline;
        let task = pending.get_or_insert_with(|| tokio::spawn(handshake(client, deadline)));
        // Dropped here at a call's deadline, the handle stays for the next caller.
        let made = (&mut *task).await;
        *pending = None;
        let connection = made.map_err(|e| {
            RedisError::Protocol(format!("the connection's setup did not finish: {e}"))
        })??;
        Ok(self
            .connection
            .get_or_init(|| async { connection })
            .await
            .clone())
    }

    /// The connection of the calls that wait for replicas, to the one server (see
    /// `RedisStore::query_replicated`), made on first use; the library is the server's, loaded
    /// by the main connection.
    pub(super) async fn waited(&self) -> Result<ConnectionManager, RedisError> {
        let Client::Single(client) = &self.client else {
            return Err(RedisError::Protocol(
                "a waited connection is made for one server only".to_owned(),
            ));
        };
        let made = self
            .waited
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(None)
                    .set_connection_timeout(Some(client_timeout(
                        self.config.deadline,
                        CLIENT_CONNECT,
                    )));
                ConnectionManager::new_with_config((**client).clone(), config).await
            })
            .await?;
        Ok(made.clone())
    }

    pub(super) async fn query<T: redis::FromRedisValue>(
        connection: &mut Connection,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisError> {
        Ok(match connection {
            Connection::Single(c) => cmd.query_async(c).await?,
            Connection::Cluster(c) => return super::cluster::query(c, cmd).await,
            Connection::Sentinel(s) => return s.query(cmd).await,
        })
    }
}

/// Connects to `client` and loads the library (see [`RedisStore::connection`]).
async fn handshake(client: Client, deadline: Duration) -> Result<Connection, RedisError> {
    let mut connection = match client {
        Client::Single(client) => {
            // The deadline (`deadline.rs`) is the one clock on a reply: it tells a slow
            // Redis from a saturated caller. The manager's own 500 ms default would fail a
            // saturated caller's calls as Redis's fault, a deadline of seconds included; its
            // 1 s to connect is stretched likewise to the longest the deadline may wait.
            let connect = client_timeout(deadline, CLIENT_CONNECT);
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(None)
                .set_connection_timeout(Some(connect));
            Connection::Single(ConnectionManager::new_with_config(*client, config).await?)
        }
        Client::Cluster(client) => Connection::Cluster(client.get_async_connection().await?),
        Client::Sentinel(sentinel) => {
            // Finding the master loads the library there (and on every master after it).
            sentinel.connect().await?;
            return Ok(Connection::Sentinel(sentinel));
        }
    };
    // Load the library up front, so the first decision need not find it missing. (A server
    // restarted, flushed or failed over later gets it on a call that finds it missing: see
    // `invoke`.)
    RedisStore::load(&mut connection).await?;
    Ok(connection)
}

/// The Redis client's own defaults: 500 ms for a reply, 1 s to connect.
const CLIENT_RESPONSE: Duration = Duration::from_millis(500);
const CLIENT_CONNECT: Duration = Duration::from_secs(1);

/// The client's own timeout: its default, or longer when our deadline may wait longer.
/// With the client's 500 ms, a store configured to wait 5 s would fail after 500 ms with a
/// client error, counted against Redis by the breaker. The cluster client needs a value;
/// the single connection takes none for replies (the deadline is its one clock).
fn client_timeout(deadline: Duration, default: Duration) -> Duration {
    crate::deadline::longest_wait(deadline).max(default)
}
