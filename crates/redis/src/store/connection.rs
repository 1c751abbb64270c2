//! The client made once per store, and its one connection (to a server or a Cluster),
//! opened on first use with the library loaded.

use redis::aio::ConnectionManager;
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
                    redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str));
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
                        Connection::Single(ConnectionManager::new((**client).clone()).await?)
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
