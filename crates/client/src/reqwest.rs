//! The policy as reqwest-middleware middleware.

use std::borrow::Cow;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next as Chain, Result};

use crate::policy::Cut;
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

/// `scheme://host:port` of a URL, as [`crate::origin_of`] writes it for a `Uri`: the
/// start of the URL as it is serialized, unless it carries credentials (formatting it
/// cost a tenth of the middleware's time); borrowed then, since the policy copies an
/// origin's name on its first request only.
fn origin(url: &reqwest::Url) -> Cow<'_, str> {
    if url.username().is_empty() && url.password().is_none() {
        // A URL serializes as `scheme://host[:port]` + path + `?query` + `#fragment`.
        let s = url.as_str();
        let rest = url.path().len()
            + url.query().map_or(0, |q| q.len() + 1)
            + url.fragment().map_or(0, |f| f.len() + 1);
        if let Some(origin) = s.get(..s.len().saturating_sub(rest)) {
            return Cow::Borrowed(origin);
        }
    }
    let host = url.host_str().unwrap_or("");
    Cow::Owned(match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    })
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
        let (mut call, mut hold) = policy
            .begin(origin(request.url()), request.method(), request.headers())
            .map_err(reqwest_middleware::Error::middleware)?;
        let mut request = Some(request);
        loop {
            let held = !hold.is_zero();
            if held {
                tokio::time::sleep(hold).await;
            }
            // While a retry could happen, a copy is sent and the request kept for it (the
            // request stays where it is: a copy sent costs one move of it less than the
            // request sent and the copy kept). A body that cannot be copied (a stream)
            // makes the request one that is sent once, so a retryable answer does not take
            // a retry from the budget that could never be made.
            let copy = match &request {
                Some(kept) if policy.may_retry(&call) => kept.try_clone(),
                _ => None,
            };
            let this = match copy {
                Some(copy) => copy,
                None => {
                    if policy.may_retry(&call) {
                        call.cannot_repeat();
                    }
                    let Some(this) = request.take() else {
                        unreachable!("a request is kept for every attempt made");
                    };
                    this
                }
            };
            // Unheld, no time has passed since `before_attempt` read the clock (the copy
            // aside): its reading serves, where reading the clock again cost as much.
            let left = if held {
                policy.time_left(&call)
            } else {
                policy.time_left_unheld(&call)
            };
            let sent = next.clone().run(this, extensions);
            let result = match left {
                Some(left) => match policy.within(left, sent).await {
                    Ok(result) => result,
                    Err(Cut) => {
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
            hold = policy
                .before_attempt(&mut call)
                .map_err(reqwest_middleware::Error::middleware)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::origin;

    #[test]
    fn the_origin_is_scheme_host_and_port_whatever_follows() {
        for (url, expected) in [
            ("http://127.0.0.1:8080/a/b?c=d#e", "http://127.0.0.1:8080"),
            ("https://api.example/", "https://api.example"),
            ("https://api.example:443/x", "https://api.example"),
            ("http://[::1]:9000?q", "http://[::1]:9000"),
            ("http://user:pw@api.example:81/x", "http://api.example:81"),
        ] {
            assert_eq!(origin(&url.parse().unwrap()), expected, "{url}");
        }
    }
}
