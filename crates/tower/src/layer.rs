//! The layer: how a service's limits are configured, shared by every clone of the service.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use ratewarden_core::{AsyncStore, Clock, RealClock};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::envoy::EnvoyConfig;
use ratewarden_policy::{Config, Engine, Jitter, KeySources, ServerSettings, StoreSettings};
use tower_layer::Layer;

use crate::answer::RejectHook;
use crate::keyed::KeyedLimit;
use crate::limits::{EngineLimits, Limits, Source};
use crate::{BuildError, RateLimit, Rejection};

/// Finds the client's address in a request.
pub(crate) type PeerFn = Arc<dyn Fn(&Parts) -> Option<IpAddr> + Send + Sync>;

/// What every clone of the service shares.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) limits: Arc<dyn Limits>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) peer: PeerFn,
    pub(crate) hook: Option<RejectHook>,
    /// Spreads a refusal's `Retry-After` by up to `retry_after_jitter`.
    pub(crate) jitter: Arc<Jitter>,
    pub(crate) retry_after_jitter: Duration,
}

/// A [`Layer`] deciding every request on the policy engine before the inner service sees it.
///
/// Clones share one engine: a router cloning the service per request enforces one budget.
/// Configure it with [`from_config`](Self::from_config) (the rules of a `ratewarden-policy`
/// file), [`from_engine`](Self::from_engine) (an engine shared with other layers or a
/// server), or [`builder`](Self::builder) (limits written in code).
#[derive(Clone)]
pub struct RateLimitLayer {
    settings: Arc<Settings>,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer").finish_non_exhaustive()
    }
}

/// The socket's address, as a server puts it in the extensions: a `SocketAddr` or an
/// `IpAddr` (axum's `ConnectInfo` needs [`RateLimitLayer::peer`]).
fn peer_from_extensions(request: &Parts) -> Option<IpAddr> {
    request
        .extensions
        .get::<SocketAddr>()
        .map(SocketAddr::ip)
        .or_else(|| request.extensions.get::<IpAddr>().copied())
}

impl RateLimitLayer {
    fn new(limits: Arc<dyn Limits>, retry_after_jitter: Duration) -> Self {
        Self {
            settings: Arc::new(Settings {
                limits,
                clock: Arc::new(RealClock::new()),
                peer: Arc::new(peer_from_extensions),
                hook: None,
                jitter: Arc::new(Jitter::new()),
                retry_after_jitter,
            }),
        }
    }

    /// A layer deciding `config`'s rules on `store`: exactly what the gateway runs with the
    /// same file (its `[server]` and `[store]` sections are not used here, except
    /// `legacy_headers` and `retry_after_jitter`).
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_memory::{MemoryStore, StoreConfig};
    /// use ratewarden_tower::RateLimitLayer;
    ///
    /// let config = ratewarden_policy::config::parse("limits.toml", r#"
    ///     [[limit]]
    ///     name = "per-ip"
    ///     key = ["ip"]
    ///     algorithm = "gcra"
    ///     rate = "10/s"
    ///     burst = 20
    /// "#).expect("a valid config");
    /// let layer = RateLimitLayer::from_config(config, MemoryStore::new(StoreConfig::default()));
    /// # let _ = layer;
    /// ```
    pub fn from_config<St: AsyncStore + 'static>(config: Config, store: St) -> Self {
        Self::from_engine(Arc::new(Engine::new(config, store)))
    }

    /// A layer deciding the rules of `engine`, which may be shared (a reload of it reaches
    /// the layer at once).
    ///
    /// `[server] legacy_headers` and `retry_after_jitter` are read once, here: a reload
    /// that changes them reaches the layer when it is built again.
    pub fn from_engine<St: AsyncStore + 'static>(engine: Arc<Engine<St>>) -> Self {
        let server = &engine.config().server;
        let (legacy, jitter) = (server.legacy_headers, server.retry_after_jitter);
        Self::new(
            Arc::new(EngineLimits {
                engine,
                source: Source::Rules { legacy },
            }),
            jitter,
        )
    }

    /// A builder of limits written in code.
    pub fn builder() -> Builder {
        Builder::default()
    }

    fn settings(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    /// Reads time from `clock` instead of the real clock: `TokioClock` under paused tokio
    /// time in tests.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.settings().clock = clock;
        self
    }

    /// Finds the client's address with `peer`, for rules keyed by `ip` (and trusted
    /// proxies' forwarding headers). By default a `SocketAddr` or `IpAddr` in the request's
    /// extensions; axum puts `ConnectInfo<SocketAddr>` there instead:
    ///
    /// ```ignore
    /// layer.peer(|r| r.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
    /// ```
    ///
    /// A request without an address counts as from `0.0.0.0`: every such request shares
    /// one budget, so a missing address limits more, never less.
    pub fn peer<F>(mut self, peer: F) -> Self
    where
        F: Fn(&Parts) -> Option<IpAddr> + Send + Sync + 'static,
    {
        self.settings().peer = Arc::new(peer);
        self
    }

    /// Adds up to `up_to` at random to every refusal's `Retry-After` (never less), so that
    /// clients refused together do not all come back together; `[server]
    /// retry_after_jitter` of a config, zero (none) for limits written in code.
    pub fn retry_after_jitter(mut self, up_to: Duration) -> Self {
        self.settings().retry_after_jitter = up_to;
        self
    }

    /// Renders refusals of HTTP requests with `hook` instead of the contract's answer (gRPC
    /// calls are still refused with a gRPC status). [`Rejection::response`] is the
    /// contract's answer, to start from.
    pub fn on_reject<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Rejection) -> http::Response<bytes::Bytes> + Send + Sync + 'static,
    {
        self.settings().hook = Some(Arc::new(hook));
        self
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, Arc::clone(&self.settings))
    }
}

pub(crate) fn unknown_peer() -> IpAddr {
    IpAddr::V4(Ipv4Addr::UNSPECIFIED)
}

/// Limits written in code, decided all or nothing (a request one refuses is charged on
/// none), built into a [`RateLimitLayer`].
#[derive(Debug, Default)]
pub struct Builder {
    limits: Vec<KeyedLimit>,
}

impl Builder {
    /// Adds `limit`.
    pub fn limit(mut self, limit: KeyedLimit) -> Self {
        self.limits.push(limit);
        self
    }

    /// The layer, counting in this process's memory.
    ///
    /// # Errors
    ///
    /// No limit, a blank name or one with control characters, or a name given twice.
    pub fn build(self) -> Result<RateLimitLayer, BuildError> {
        self.build_on(MemoryStore::new(StoreConfig::default()))
    }

    /// The layer, counting on `store`: a `RedisStore` shares the limits with every service
    /// using the same limits on the same Redis (or Redis Cluster).
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub fn build_on<St: AsyncStore + 'static>(
        self,
        store: St,
    ) -> Result<RateLimitLayer, BuildError> {
        if self.limits.is_empty() {
            return Err(BuildError::NoLimits);
        }
        let mut seen = HashSet::new();
        for limit in &self.limits {
            let name = &limit.name;
            if name.trim().is_empty() || name.chars().any(char::is_control) {
                return Err(BuildError::BadName { name: name.clone() });
            }
            if !seen.insert(name.as_str()) {
                return Err(BuildError::DuplicateName { name: name.clone() });
            }
        }
        let config = Config {
            trusted_proxies: Default::default(),
            keys: KeySources::default(),
            store: StoreSettings::default(),
            regions: None,
            server: ServerSettings::default(),
            rules: self.limits.iter().map(KeyedLimit::rule).collect(),
        };
        let engine = Arc::new(Engine::with_envoy(config, EnvoyConfig::default(), store));
        Ok(RateLimitLayer::new(
            Arc::new(EngineLimits {
                engine,
                source: Source::Keyed(self.limits),
            }),
            Duration::ZERO,
        ))
    }
}
