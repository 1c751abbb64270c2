//! The upstream behind the gateway, and what each worker keeps of it for itself.
//!
//! Its own file so the listener (which hands a worker's `Local` to each request) and the
//! gateway (which forwards through it) both depend on it, not on each other.

pub(crate) mod pool;

use anyhow::Context;
use http::uri::Authority;
use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::serve::reply::Body;
use ratewarden_policy::Bounds;

/// The service behind the gateway, and a pool of connections to it.
pub(crate) struct Upstream {
    pub(crate) authority: Authority,
    /// Spoken to in HTTP/2 by prior knowledge (`h2c://`: a gRPC service), every request
    /// by hyper's client; otherwise HTTP/1.1.
    pub(crate) http2: bool,
    client: Client<HttpConnector, Body>,
    /// The connections of the gateway's lean path (`lean/`, `pool`), kept apart from
    /// hyper-util's pool.
    pub(crate) lean: pool::Pool,
}

impl Upstream {
    /// The upstream at `url`, connected to within `bounds.upstream_connect_timeout`, its
    /// idle connections kept `bounds.upstream_pool_idle`.
    pub(crate) fn new(url: &str, bounds: &Bounds) -> anyhow::Result<Self> {
        let uri: Uri = url
            .parse()
            .with_context(|| format!("`[server] upstream` `{url}` is not a URL"))?;
        let authority = uri
            .authority()
            .cloned()
            .with_context(|| format!("`[server] upstream` `{url}` has no host"))?;
        let http2 = uri.scheme_str() == Some("h2c");
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        // An upstream that does not take the connection fails fast, a 504.
        connector.set_connect_timeout(Some(bounds.upstream_connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(bounds.upstream_pool_idle)
            .http2_only(http2)
            .timer(TokioTimer::new())
            .build(connector);
        let lean = pool::Pool::new(&authority);
        Ok(Self {
            authority,
            http2,
            client,
            lean,
        })
    }

    pub(crate) fn client(&self) -> &Client<HttpConnector, Body> {
        &self.client
    }
}

/// What each worker keeps for itself: its pool of upstream connections, whose tasks run on
/// the worker's own runtime.
pub(crate) struct Local {
    pub(crate) upstream: Option<Upstream>,
}

impl Local {
    pub(crate) fn new(upstream: Option<&str>, bounds: &Bounds) -> anyhow::Result<Self> {
        Ok(Self {
            upstream: upstream.map(|url| Upstream::new(url, bounds)).transpose()?,
        })
    }
}
