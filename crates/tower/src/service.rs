//! The service: decide in `call`, then serve or refuse.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::CACHE_CONTROL;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use crate::answer::{self, Answer, Rejection};
use crate::layer::{unknown_peer, Settings};
use crate::permit::PermitGuard;
use crate::{grpc, LimitBody, Reservation};

/// The future of a [`RateLimit`] call.
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<LimitBody<B>>, E>> + Send>>;

/// A service whose requests are decided on the policy engine before `S` sees them. Made by
/// [`RateLimitLayer`](crate::RateLimitLayer).
///
/// Nothing is reserved in `poll_ready` (which only asks `S`): the decision is made in
/// `call`, on state every clone shares, so cloning the service (axum does, per request)
/// never multiplies the budget.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    ReqB: Send + 'static,
    ResB: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<LimitBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // The clone that was polled ready serves this request; the fresh clone stays for
        // the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let settings = Arc::clone(&self.settings);
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let grpc = grpc::is_grpc(&parts);
            let peer = (settings.peer)(&parts).unwrap_or_else(unknown_peer);
            let limits = &settings.limits;
            let decided = limits.decide(&parts, peer, settings.clock.now()).await;
            let verdict = match decided {
                Ok(verdict) => verdict,
                Err(unreadable) => {
                    let response = if grpc {
                        grpc::invalid(&unreadable.detail)
                    } else {
                        answer::problem(unreadable.status, &unreadable.detail)
                    };
                    return Ok(response.map(LimitBody::full));
                }
            };
            let Some(verdict) = verdict else {
                // No limit applies.
                let response = inner.call(Request::from_parts(parts, body)).await?;
                return Ok(response.map(|b| LimitBody::inner(b, None)));
            };
            let (headers, delay, reservation, permit) =
                match answer::answer(&verdict, limits.legacy()) {
                    Answer::Stop(rejection) => return Ok(refuse(&settings, &rejection, grpc)),
                    Answer::Go {
                        headers,
                        delay,
                        reservation,
                        permit,
                    } => (headers, delay, reservation, permit),
                };
            // Held from here: dropped with this future (the client went away before the
            // answer) or with the response body.
            let permit = permit.map(|id| PermitGuard {
                limits: Arc::clone(limits),
                clock: Arc::clone(&settings.clock),
                id: Some(id),
            });
            if let Some(id) = reservation {
                parts.extensions.insert(Reservation {
                    limits: Arc::clone(limits),
                    clock: Arc::clone(&settings.clock),
                    id,
                });
            }
            if !delay.is_zero() {
                // A queueing rule (leaky-queue): the request waits its turn.
                tokio::time::sleep(delay).await;
            }
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let (mut head, body) = response.into_parts();
            for (name, value) in &headers {
                // The service's own caching policy wins over the layer's `private`.
                if *name == CACHE_CONTROL && head.headers.contains_key(CACHE_CONTROL) {
                    continue;
                }
                if let Ok(value) = http::HeaderValue::from_str(value) {
                    head.headers.append(name.clone(), value);
                }
            }
            Ok(Response::from_parts(head, LimitBody::inner(body, permit)))
        })
    }
}

/// The refusal of a request: the gRPC status of a gRPC call, else the user's rendering or
/// the contract's answer.
fn refuse<B>(settings: &Settings, rejection: &Rejection, grpc: bool) -> Response<LimitBody<B>> {
    let response = if grpc {
        grpc::refused(rejection)
    } else if let Some(hook) = &settings.hook {
        hook(rejection)
    } else {
        rejection.response()
    };
    response.map(LimitBody::full)
}
