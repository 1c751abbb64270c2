//! What a listener serves, as the connection layer sees it: a front door it is handed as a
//! value (`gateway::Gateway`, `api::Api`, `admin::Admin`) and never names. Accepting,
//! capping clients, timing and stopping connections stay here; what a request means is the
//! door's.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use ratewarden_policy::Bounds;

use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::wire::Wire;
use crate::serve::reply::Body;

/// A front door served over HTTP/1.1 (and HTTP/2, by hyper).
pub(crate) trait Door: Send + Sync + 'static {
    /// The listener's name in logs and in `ratewarden_responses_total{listener}`.
    const NAME: &'static str;

    /// Serves a just-accepted connection on the door's own HTTP/1.1 path, if it has one,
    /// until it closes; or hands it back, with what was read of it, for hyper to serve the
    /// rest. A door without one hands it back at once. Over TLS, `stream` is the
    /// handshaken stream of a client that chose HTTP/1.1.
    fn lean(
        &self,
        stream: Wire,
        app: &Arc<App>,
        peer: SocketAddr,
        bounds: Bounds,
        stop: &mut Stop<'_>,
    ) -> impl Future<Output = Option<Rewind<Wire>>> + Send;

    /// The answer to one request hyper read.
    fn handle(
        &self,
        app: &Arc<App>,
        peer: SocketAddr,
        request: Request<Incoming>,
    ) -> impl Future<Output = Response<Body>> + Send;
}
