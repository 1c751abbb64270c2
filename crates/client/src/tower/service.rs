//! The service: pace, send, read the answer, maybe wait and send again.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use crate::policy::Cut;
use crate::{classify_error, Attempt, BoxError, Error, Next, Policy};

/// A client service that paces, retries and budgets per its [`Policy`].
///
/// The response of the last attempt is returned as it is: a 429 whose retries are spent
/// reaches the caller as a 429. Errors are [`Error`]: the inner service's in
/// [`Error::Inner`], or the client's own (deadline, throttled).
#[derive(Debug, Clone)]
pub struct Retry<S> {
    inner: S,
    policy: Policy,
}

impl<S> Retry<S> {
    /// `inner` retried per `policy`.
    pub fn new(inner: S, policy: Policy) -> Self {
        Self { inner, policy }
    }

    /// The policy (for its counters).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> Service<Request<B>> for Retry<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Error: Into<BoxError> + Send,
    S::Future: Send,
    B: Clone + Send + 'static,
    R: Send + 'static,
{
    type Response = Response<R>;
    type Error = Error;
    type Future = BoxFuture<Result<Response<R>, Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Error::Inner(e.into()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service that was made ready serves the first attempt; a clone serves retries
        // (tower's rule: readiness belongs to the instance that was polled).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let policy = self.policy.clone();
        Box::pin(async move {
            let origin = crate::origin_of(request.uri());
            let (mut call, mut hold) = policy.begin(origin, request.method(), request.headers())?;
            let mut request = Some(request.into_parts());
            let mut first = true;
            loop {
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                if !first {
                    std::future::poll_fn(|cx| inner.poll_ready(cx))
                        .await
                        .map_err(|e| Error::Inner(e.into()))?;
                }
                first = false;
                // A copy only while a retry could follow; the last attempt sends the original.
                let attempt = match &request {
                    Some((parts, body)) if policy.may_retry(&call) => {
                        Request::from_parts(parts.clone(), body.clone())
                    }
                    _ => match request.take() {
                        Some((parts, body)) => Request::from_parts(parts, body),
                        None => unreachable!("no retry follows an attempt sent without a copy"),
                    },
                };
                let sent = inner.call(attempt);
                let result = match policy.time_left(&call) {
                    Some(left) => match policy.within(left, sent).await {
                        Ok(result) => result,
                        Err(Cut) => return Err(policy.deadline_error(&call)),
                    },
                    None => sent.await,
                };
                let (next, outcome) = match result {
                    Ok(response) => {
                        let next = policy.after_attempt(
                            &mut call,
                            Attempt::Response {
                                status: response.status(),
                                headers: response.headers(),
                            },
                        );
                        (next, Ok(response))
                    }
                    Err(e) => {
                        let e: BoxError = e.into();
                        let next = policy.after_attempt(&mut call, classify_error(&*e));
                        (next, Err(Error::Inner(e)))
                    }
                };
                match next {
                    Next::Done => return outcome,
                    Next::Retry(wait) => tokio::time::sleep(wait).await,
                }
                hold = policy.before_attempt(&mut call)?;
            }
        })
    }
}
