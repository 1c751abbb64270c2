//! The gateway: decide each request, then forward the allowed ones to the upstream,
//! streaming both ways, and add the RateLimit fields to what comes back.
//!
//! Two HTTP/1.1 paths serve it, in clear text or over TLS: the lean one (`lean/`, the
//! codec's own, for plain `GET` and `HEAD`) and hyper's (`proxy`, everything the lean path
//! hands over). Both admit a request
//! the one way (`passage`), write the client's forwarding headers the one way
//! (`forwarding`) and reach the upstream through the worker's `upstream`. HTTP/2 connections
//! are hyper's too, and a gRPC call's own answers are written as gRPC
//! expects them (`grpc`).

mod forwarding;
mod grpc;
mod lean;
mod overrides;
mod passage;
mod proxy;
mod sent_body;
mod settling;
mod tunnel;
pub(crate) mod upstream;

pub(crate) use upstream::Local;

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use ratewarden_policy::Bounds;

use crate::serve::app::App;
use crate::serve::conn::graceful::Stop;
use crate::serve::conn::rewind::Rewind;
use crate::serve::conn::{Door, Wire};
use crate::serve::reply::Body;

/// The gateway as a listener's door, with the worker's connections to the upstream.
pub(crate) struct Gateway {
    pub(crate) local: Arc<Local>,
}

impl Door for Gateway {
    const NAME: &'static str = "gateway";

    async fn lean(
        &self,
        stream: Wire,
        app: &Arc<App>,
        peer: SocketAddr,
        bounds: Bounds,
        stop: &mut Stop<'_>,
    ) -> Option<Rewind<Wire>> {
        lean::serve(stream, app, &self.local, peer, bounds, stop).await
    }

    async fn handle(
        &self,
        app: &Arc<App>,
        peer: SocketAddr,
        request: Request<Incoming>,
    ) -> Response<Body> {
        proxy::handle(app, &self.local, peer, request).await
    }
}
