//! The policy as reqwest-middleware middleware.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next as Chain, Result};

use crate::policy::Cut;
use crate::{classify_error, Attempt, Call, Next, Policy};

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
///
/// Unless the URL carries credentials, this is the start of the URL as it is serialized, up
/// to its path, borrowed: formatting it would be a large share of the middleware's time,
/// and the policy copies an origin's name on its first request only.
fn origin(url: &reqwest::Url) -> Cow<'_, str> {
    if url.username().is_empty() && url.password().is_none() {
        // `scheme://host[:port]` + path + `?query` + `#fragment`: the URL keeps where its
        // path starts, where subtracting the lengths of the rest costs three more walks.
        return Cow::Borrowed(&url[..url::Position::BeforePath]);
    }
    let host = url.host_str().unwrap_or("");
    Cow::Owned(match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    })
}

/// A copy of `request` to send while the original is kept for a retry: `None` when its body
/// is a stream, which can be sent only once.
///
/// A request without a body is copied part by part rather than by `Request::try_clone`,
/// which builds a map of extensions for the timeout and then drops it for a copy of the
/// original's (most of its cost).
/// The copy is the same request to everything that can look at it: a reqwest 0.13
/// `Request`'s extensions are private to reqwest, which reads nothing from them but the
/// timeout (`execute_request`: the rest are dropped unread, never handed to hyper), so the
/// timeout is all of them that is copied (read in reqwest 0.13.5: a reqwest that reads
/// more of them needs this copy to carry them). A body is copied by `try_clone`, which
/// shares its bytes (the public `Body::as_bytes` would copy them).
fn copy(request: &Request) -> Option<Request> {
    if request.body().is_some() {
        return request.try_clone();
    }
    let mut copy = Request::new(request.method().clone(), request.url().clone());
    *copy.headers_mut() = request.headers().clone();
    *copy.version_mut() = request.version();
    if let Some(&timeout) = request.timeout() {
        *copy.timeout_mut() = Some(timeout);
    }
    Some(copy)
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

impl RetryMiddleware {
    /// Sends one attempt of `call` and reads its answer: the outcome, and what follows it.
    ///
    /// Not an `async fn`: one binds its arguments a second time inside its future
    /// (rust-lang/rust#62958), and this one is part of the boxed future of every call.
    #[allow(clippy::manual_async_fn)] // the argument bound twice, above
    fn attempt<'a>(
        &'a self,
        call: &'a mut Call,
        left: Option<Duration>,
        sent: impl Future<Output = Result<Response>> + 'a,
    ) -> impl Future<Output = Result<(Result<Response>, Next)>> + 'a {
        async move {
            let policy = &self.policy;
            let result = match left {
                Some(left) => match policy.within(left, sent).await {
                    Ok(result) => result,
                    Err(Cut) => {
                        return Err(reqwest_middleware::Error::middleware(
                            policy.deadline_error(call),
                        ))
                    }
                },
                None => sent.await,
            };
            let next = match &result {
                Ok(response) => policy.after_attempt(
                    call,
                    Attempt::Response {
                        status: response.status(),
                        headers: response.headers(),
                    },
                ),
                Err(reqwest_middleware::Error::Reqwest(e)) => {
                    policy.after_attempt(call, classify(e))
                }
                Err(reqwest_middleware::Error::Middleware(e)) => {
                    policy.after_attempt(call, classify_error(e.as_ref()))
                }
            };
            Ok((result, next))
        }
    }
}

/// `Middleware` written out rather than through the `async_trait` macro (the signature is
/// the one it writes): its future binds each argument again inside (a second copy of the
/// request in the box every call allocates).
impl Middleware for RetryMiddleware {
    fn handle<'life0, 'life1, 'life2, 'call>(
        &'life0 self,
        request: Request,
        extensions: &'life1 mut Extensions,
        next: Chain<'life2>,
    ) -> Pin<Box<dyn Future<Output = Result<Response>> + Send + 'call>>
    where
        'life0: 'call,
        'life1: 'call,
        'life2: 'call,
        Self: 'call,
    {
        Box::pin(self.call(Some(request), extensions, next))
    }
}

impl RetryMiddleware {
    /// The whole call: pace, send, read the answer, maybe wait and send again.
    ///
    /// Not an `async fn`, as [`attempt`](Self::attempt): this is the future
    /// reqwest-middleware boxes for every call, and an `async fn` would hold the request
    /// twice.
    #[allow(clippy::manual_async_fn)] // the argument bound twice, above
    fn call<'a>(
        &'a self,
        mut request: Option<Request>,
        extensions: &'a mut Extensions,
        next: Chain<'a>,
    ) -> impl Future<Output = Result<Response>> + Send + 'a {
        async move {
            let policy = &self.policy;
            let Some(first) = &request else {
                unreachable!("`handle` passes the request");
            };
            let (mut call, mut hold) = policy
                .begin(origin(first.url()), first.method(), first.headers())
                .map_err(reqwest_middleware::Error::middleware)?;
            // reqwest-middleware boxes this future for every call: it holds the request
            // once (taken as an `Option` rather than put in one), one attempt's future and
            // no answer across a wait, so that it stays within the allocator's fast sizes
            // (glibc's thread cache serves up to about 1 KB).
            loop {
                let held = !hold.is_zero();
                if held {
                    tokio::time::sleep(hold).await;
                }
                // Unheld, no time has passed since `before_attempt` read the clock (the copy
                // aside): its reading serves, and a second reading would cost as much again.
                let left = if held {
                    policy.time_left(&call)
                } else {
                    policy.time_left_unheld(&call)
                };
                // In a block: the copy and the request sent end before the attempt is
                // awaited, so the future holds neither.
                let sent = {
                    // While a retry could happen, a copy is sent and the request kept for it. A
                    // body that cannot be copied (a stream) makes the request one that is sent
                    // once, so a retryable answer does not take a retry from the budget that
                    // could never be made.
                    let copy = match &request {
                        Some(kept) if policy.may_retry(&call) => {
                            let copy = copy(kept);
                            if copy.is_none() {
                                call.cannot_repeat();
                            }
                            copy
                        }
                        _ => None,
                    };
                    let this = match copy {
                        Some(copy) => copy,
                        None => match request.take() {
                            Some(this) => this,
                            None => unreachable!("a request is kept for every attempt made"),
                        },
                    };
                    next.clone().run(this, extensions)
                };
                match self.attempt(&mut call, left, sent).await? {
                    (_, Next::Retry(wait)) if request.is_some() => tokio::time::sleep(wait).await,
                    (result, _) => return result,
                }
                hold = policy
                    .before_attempt(&mut call)
                    .map_err(reqwest_middleware::Error::middleware)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RetryMiddleware;
    use crate::Policy;
    use reqwest_middleware::{Middleware, Next};

    /// Measures the future the next middleware (ours) hands back, without sending it.
    struct Measure(std::sync::Mutex<usize>);

    impl Middleware for Measure {
        fn handle<'a, 'b, 'c, 'call>(
            &'a self,
            request: reqwest::Request,
            extensions: &'b mut http::Extensions,
            next: Next<'c>,
        ) -> super::Pin<
            Box<dyn super::Future<Output = super::Result<reqwest::Response>> + Send + 'call>,
        >
        where
            'a: 'call,
            'b: 'call,
            'c: 'call,
            Self: 'call,
        {
            let ours = next.run(request, extensions);
            *self.0.lock().unwrap() = std::mem::size_of_val(&*ours);
            Box::pin(async {
                Err(reqwest_middleware::Error::middleware(
                    std::io::Error::other("measured"),
                ))
            })
        }
    }

    /// reqwest-middleware allocates our future for every call: past about 1 KB, glibc
    /// serves it outside its per-thread cache, a slower path on every request (the request
    /// alone is a quarter of a kilobyte).
    #[tokio::test]
    async fn the_future_of_a_call_stays_within_the_allocators_cache() {
        let measure = std::sync::Arc::new(Measure(std::sync::Mutex::new(0)));
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with_arc(measure.clone())
            .with(RetryMiddleware::new(Policy::default()))
            .build();
        assert!(client.get("http://127.0.0.1:9/").send().await.is_err());
        let size = *measure.0.lock().unwrap();
        assert!(
            size > 0 && size <= 1000,
            "the call's future is {size} bytes"
        );
    }

    use super::{copy, origin};

    /// The copy sent while the original is kept for a retry is the original to whatever
    /// reads it: method, URL, headers (repeated ones in order), version, timeout and body;
    /// a stream is not copied.
    #[test]
    fn a_copy_is_the_request_as_try_clone_copies_it() {
        use http::{HeaderValue, Method, Version};
        use std::time::Duration;

        let client = reqwest::Client::new();
        let mut requests = vec![
            client.get("http://127.0.0.1:8080/a?b=c").build().unwrap(),
            client
                .head("http://user:pw@api.example:81/x")
                .timeout(Duration::from_millis(1500))
                .version(Version::HTTP_2)
                .header("x-one", "1")
                .build()
                .unwrap(),
            client
                .put("http://api.example/upload")
                .header("idempotency-key", "k")
                .body("the body")
                .build()
                .unwrap(),
        ];
        let mut repeated = client
            .request(Method::DELETE, "http://[::1]:9/")
            .build()
            .unwrap();
        for value in ["a", "b", "c"] {
            repeated
                .headers_mut()
                .append("x-many", HeaderValue::from_static(value));
        }
        *repeated.timeout_mut() = Some(Duration::ZERO);
        requests.push(repeated);
        for request in &requests {
            let (ours, theirs) = (copy(request).unwrap(), request.try_clone().unwrap());
            assert_eq!(ours.method(), theirs.method());
            assert_eq!(ours.url(), theirs.url());
            assert_eq!(ours.headers(), theirs.headers());
            let values = |r: &reqwest::Request| {
                r.headers()
                    .get_all("x-many")
                    .iter()
                    .map(|v| v.as_bytes().to_vec())
                    .collect::<Vec<_>>()
            };
            assert_eq!(values(&ours), values(&theirs));
            assert_eq!(ours.version(), theirs.version());
            assert_eq!(ours.timeout(), theirs.timeout());
            assert_eq!(ours.timeout(), request.timeout());
            assert_eq!(
                ours.body().map(|b| b.as_bytes()),
                theirs.body().map(|b| b.as_bytes())
            );
        }
        let mut streamed = client.post("http://api.example/").build().unwrap();
        *streamed.body_mut() = Some(reqwest::Body::wrap(http_body_util::Full::new(
            bytes::Bytes::from_static(b"order 17"),
        )));
        assert!(copy(&streamed).is_none());
    }

    #[test]
    fn the_origin_is_scheme_host_and_port_whatever_follows() {
        for (url, expected) in [
            ("http://127.0.0.1:8080/a/b?c=d#e", "http://127.0.0.1:8080"),
            ("https://api.example/", "https://api.example"),
            ("https://api.example:443/x", "https://api.example"),
            ("http://[::1]:9000?q", "http://[::1]:9000"),
            ("http://a.test", "http://a.test"),
            ("http://a.test#f", "http://a.test"),
            ("http://a.test:8080?q=/x#/y", "http://a.test:8080"),
            ("foo://host:12/p?q", "foo://host:12"),
            ("http://user:pw@api.example:81/x", "http://api.example:81"),
            ("http://user@api.example/x", "http://api.example"),
            ("http://:pw@api.example/x", "http://api.example"),
        ] {
            assert_eq!(origin(&url.parse().unwrap()), expected, "{url}");
        }
    }
}
