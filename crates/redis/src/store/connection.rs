//! The client made once per store, and its one connection (to a server or a Cluster),
//! opened on first use with the library loaded.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

use super::{RedisConfig, RedisError, RedisStore, Target};

/// Made once per store; boxed because the clients are large with TLS.
pub(super) enum Client {
    Single(Box<redis::Client>),
    Cluster(Box<redis::cluster::ClusterClient>),
}

impl Client {
    /// The client for `config`'s target, trusting `config`'s CA if it has one.
    pub(super) fn new(config: &RedisConfig) -> Result<Self, RedisError> {
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
                        .connection_timeout(client_timeout(config.deadline, CLIENT_CONNECT));
                if config.tls_ca.is_some() {
                    builder = builder.certs(certificates());
                }
                Client::Cluster(Box::new(builder.build()?))
            }
        })
    }
}

#[derive(Clone)]
pub(super) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisStore {
    pub(super) async fn connection(&self) -> Result<Connection, RedisError> {
        let connection = self
            .connection
            .get_or_try_init(|| async {
                let mut connection = match &self.client {
                    Client::Single(client) => {
                        // The deadline (`deadline.rs`) is the one clock on a reply: it
                        // tells a slow Redis from a saturated caller. The manager's own
                        // 500 ms default would fail a saturated caller's calls as Redis's
                        // fault, a deadline of seconds included; its 1 s to connect is
                        // stretched likewise to the longest the deadline may wait.
                        let connect = client_timeout(self.config.deadline, CLIENT_CONNECT);
                        let config = ConnectionManagerConfig::new()
                            .set_response_timeout(None)
                            .set_connection_timeout(Some(connect));
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

    pub(super) async fn query<T: redis::FromRedisValue>(
        connection: &mut Connection,
        cmd: &redis::Cmd,
    ) -> Result<T, RedisError> {
        Ok(match connection {
            Connection::Single(c) => cmd.query_async(c).await?,
            Connection::Cluster(c) => cmd.query_async(c).await?,
        })
    }
}

/// The Redis client's own defaults: 500 ms for a reply, 1 s to connect.
const CLIENT_RESPONSE: Duration = Duration::from_millis(500);
const CLIENT_CONNECT: Duration = Duration::from_secs(1);

/// The client's own timeout: its default, or longer when our deadline may wait longer.
/// With the client's 500 ms, a store configured to wait 5 s failed after 500 ms with a
/// client error, counted against Redis by the breaker (the conformance suite's
/// "Redis(timed out)" on a loaded machine). The cluster client needs a value; the single
/// connection takes none for replies (the deadline is its one clock).
fn client_timeout(deadline: Duration, default: Duration) -> Duration {
    crate::deadline::longest_wait(deadline).max(default)
}
