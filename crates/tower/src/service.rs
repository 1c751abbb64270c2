//! The service: decide in `call`, then serve or refuse.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::CACHE_CONTROL;
use http::request::Parts;
use http::{HeaderName, HeaderValue, Request, Response};
use http_body::Body;
use tower_service::Service;

use crate::answer::{self, Handling, Rejection};
use crate::layer::{unknown_peer, Settings};
use crate::limits::Unreadable;
use crate::{grpc, LimitBody, Reservation};
use ratewarden_core::adaptive::Completion;
use ratewarden_policy::Verdict;
use ratewarden_policy::{ClockTimer, PermitGuard};

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
        let (mut parts, body) = request.into_parts();
        let grpc = grpc::is_grpc(&parts);
        let peer = (settings.peer)(&parts).unwrap_or_else(unknown_peer);
        Box::pin(async move {
            let timer = ClockTimer(&*settings.clock);
            let decided = settings.limits.decide(&parts, peer, &timer).await;
            // One call of the inner service, below: each await point holding its future
            // would make this future larger, and every request allocates it.
            let (headers, delay, mut permit) = match prepare(&settings, decided, &mut parts, grpc) {
                Prepared::Go(go) => go,
                Prepared::Stop(answer) => return Ok(answer.map(LimitBody::full)),
            };
            if !delay.is_zero() {
                // A queueing rule (leaky-queue): the request waits its turn. Boxed: a
                // timer is large, and rarely needed.
                Box::pin(tokio::time::sleep(delay)).await;
            }
            // Timed only for a permit to report it to (the clock is read per request
            // otherwise for nothing).
            let sent = permit.as_ref().map(|_| settings.clock.now());
            let response = inner.call(Request::from_parts(parts, body)).await;
            // The round trip is to the inner service's answer, as the gateway's is to the
            // upstream's response head; an error or a 5xx is a drop: the service is
            // failing, which is what an adaptive limit must back off from. So is a gRPC
            // server failure, which comes in a 200: its `grpc-status` in the headers
            // (trailers-only) here, in the trailers as the body ends (`LimitBody`).
            if let (Some(permit), Some(sent)) = (permit.as_mut(), sent) {
                permit.completion = Some(Completion {
                    rtt_ns: Some(settings.clock.now().saturating_sub(sent)),
                    dropped: response.as_ref().map_or(true, |r| {
                        r.status().is_server_error()
                            || (grpc && grpc::is_server_failure(r.headers()))
                    }),
                });
            }
            let (mut head, body) = response?.into_parts();
            for (name, value) in headers {
                // The service's own caching policy wins over the layer's `private`.
                if name == CACHE_CONTROL && head.headers.contains_key(CACHE_CONTROL) {
                    continue;
                }
                head.headers.append(name, value);
            }
            Ok(Response::from_parts(head, LimitBody::inner(body, permit)))
        })
    }
}

/// What an allowed request goes on with: the headers for its response, its queueing delay
/// and its permit.
type Go = (
    Vec<(HeaderName, HeaderValue)>,
    Duration,
    Option<PermitGuard>,
);

/// A request prepared to go on, or the answer that stops it.
enum Prepared {
    Go(Go),
    Stop(http::Response<Bytes>),
}

/// Turns a decision into what the request goes on with (its reservation put in its
/// extensions), or the answer that stops it.
fn prepare(
    settings: &Settings,
    decided: Result<Option<Verdict>, Unreadable>,
    parts: &mut Parts,
    grpc: bool,
) -> Prepared {
    let verdict = match decided {
        Ok(Some(verdict)) => verdict,
        // No limit applies.
        Ok(None) => return Prepared::Go((Vec::new(), Duration::ZERO, None)),
        Err(unreadable) => {
            return Prepared::Stop(if grpc {
                grpc::invalid(&unreadable.detail)
            } else {
                answer::problem(unreadable.status, &unreadable.detail)
            })
        }
    };
    let limits = &settings.limits;
    let retry = settings
        .jitter
        .apply(verdict.retry_ns(), settings.retry_after_jitter);
    match answer::answer(&verdict, limits.legacy(), retry) {
        Handling::Stop(rejection) => Prepared::Stop(refuse(settings, &rejection, grpc)),
        Handling::Go {
            headers,
            delay,
            reservation,
            permit,
        } => {
            // Kept only when it carries an id to settle or release with.
            let owner = (reservation.is_some() || permit.is_some()).then(|| Arc::new(verdict));
            if let (Some(id), Some(owner)) = (reservation, &owner) {
                parts.extensions.insert(Reservation {
                    owner: Arc::clone(owner),
                    limits: Arc::clone(limits),
                    clock: Arc::clone(&settings.clock),
                    id,
                });
            }
            // Held from here: dropped with the service's future (the client went away
            // before the answer) or with the response body.
            let permit = permit.zip(owner).map(|(id, owner)| {
                let limits = Arc::clone(limits);
                let clock = Arc::clone(&settings.clock);
                PermitGuard::new(Box::new(move |completion| {
                    limits.release(id, owner, completion, clock.now())
                }))
            });
            Prepared::Go((headers, delay, permit))
        }
    }
}

/// The refusal of a request: the gRPC status of a gRPC call, else the user's rendering or
/// the contract's answer.
fn refuse(settings: &Settings, rejection: &Rejection, grpc: bool) -> http::Response<Bytes> {
    if grpc {
        grpc::refused(rejection)
    } else if let Some(hook) = &settings.hook {
        hook(rejection)
    } else {
        rejection.response()
    }
}
