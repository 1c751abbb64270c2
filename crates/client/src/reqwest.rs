//! The policy as reqwest-middleware middleware.

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next as Chain, Result};

use crate::{classify_error, Attempt, Next, Policy};

/// reqwest-middleware middleware that paces, retries and budgets per its [`Policy`].
///
/// A request whose body cannot be copied (a stream) is sent once. The last attempt's
/// response is returned as it is; the client's own refusals (deadline, throttled) are
/// `reqwest_middleware::Error::Middleware` holding a [`crate::Error`].
///
/// # Examples
///
/// ```
/// use ratewarden_client::{Policy, RetryMiddleware};
///
/// let policy = Policy::default();
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(policy.clone()))
///     .build();
/// # let _ = client;
/// ```
#[derive(Debug, Clone)]
pub struct RetryMiddleware {
    policy: Policy,
}

impl RetryMiddleware {
    /// Middleware applying `policy`.
    pub fn new(policy: Policy) -> Self {
        Self { policy }
    }

    /// The policy (for its counters).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}

/// `scheme://host:port` of a URL, as [`crate::origin_of`] writes it for a `Uri`.
fn origin(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

fn classify(e: &reqwest::Error) -> Attempt<'static> {
    if e.is_connect() {
        Attempt::ConnectError
    } else if e.is_timeout() {
        Attempt::Timeout
    } else {
        classify_error(e)
    }
}

#[async_trait::async_trait]
impl Middleware for RetryMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Chain<'_>,
    ) -> Result<Response> {
        let policy = &self.policy;
        let mut call = policy
            .start(origin(request.url()), request.method(), request.headers())
            .map_err(reqwest_middleware::Error::middleware)?;
        let mut request = Some(request);
        loop {
            let hold = policy
                .before_attempt(&mut call)
                .map_err(reqwest_middleware::Error::middleware)?;
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
            let Some(this) = request.take() else {
                unreachable!("a request is kept for every attempt made");
            };
            request = this.try_clone();
            let sent = next.clone().run(this, extensions);
            let result = match policy.time_left(&call) {
                Some(left) => match tokio::time::timeout(left, sent).await {
                    Ok(result) => result,
                    Err(_) => {
                        return Err(reqwest_middleware::Error::middleware(
                            policy.deadline_error(&call),
                        ))
                    }
                },
                None => sent.await,
            };
            let next_step = match &result {
                Ok(response) => policy.after_attempt(
                    &mut call,
                    Attempt::Response {
                        status: response.status(),
                        headers: response.headers(),
                    },
                ),
                Err(reqwest_middleware::Error::Reqwest(e)) => {
                    policy.after_attempt(&mut call, classify(e))
                }
                Err(reqwest_middleware::Error::Middleware(e)) => {
                    policy.after_attempt(&mut call, classify_error(e.as_ref()))
                }
            };
            match next_step {
                Next::Retry(wait) if request.is_some() => tokio::time::sleep(wait).await,
                _ => return result,
            }
        }
    }
}
