//! Response bodies and the responses every listener builds the same way.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as HttpBody, Frame, SizeHint};

/// Errors a body may fail with while streaming.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every response body: a buffer, or the upstream's stream.
pub(crate) type Body = BoxBody<Bytes, BoxError>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A response of the rate limiting contract (429 or 503), as built by `ratewarden-http`.
pub(crate) fn contract(answer: ratewarden_http::Response) -> Response<Body> {
    Plain::contract(answer).response()
}

/// An answer as its status, header lines and body, before it is a hyper `Response`: the
/// decision API's lean path (`http/lean.rs`) writes it straight to its connection and
/// hyper's path turns it into a `Response` ([`Plain::response`]), so that both paths send
/// the same lines from one place.
#[derive(Debug)]
pub(crate) struct Plain {
    pub(crate) status: StatusCode,
    /// The `content-type` of the API's own answers, sent with `cache-control: no-store`;
    /// `None` when `headers` carry every line (a contract answer).
    pub(crate) kind: Option<&'static str>,
    /// Header lines after those, in order; a value that cannot be a header (none of ours)
    /// is skipped.
    pub(crate) headers: Vec<(HeaderName, String)>,
    pub(crate) body: Bytes,
}

impl Plain {
    /// A JSON answer, not to be cached.
    pub(crate) fn json(status: StatusCode, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            kind: Some("application/json"),
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// A response of the rate limiting contract (429 or 503), as built by `ratewarden-http`.
    pub(crate) fn contract(answer: ratewarden_http::Response) -> Self {
        Self {
            status: StatusCode::from_u16(answer.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
            kind: None,
            headers: answer.headers,
            body: answer.body.into(),
        }
    }

    /// As hyper's path sends it.
    pub(crate) fn response(self) -> Response<Body> {
        let mut response = Response::new(full(self.body));
        *response.status_mut() = self.status;
        if let Some(kind) = self.kind {
            let headers = response.headers_mut();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(kind));
            headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
        add_headers(&mut response, &self.headers);
        response
    }
}

/// Appends header lines made ready by the contract (an allowed request's RateLimit fields).
pub(crate) fn append_headers<B>(
    response: &mut Response<B>,
    headers: Vec<(HeaderName, HeaderValue)>,
) {
    let map = response.headers_mut();
    map.reserve(headers.len());
    for (name, value) in headers {
        map.append(name, value);
    }
}

/// Adds header lines, skipping any value that cannot be a header (none of ours).
pub(crate) fn add_headers<B>(response: &mut Response<B>, headers: &[(HeaderName, String)]) {
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().append(name.clone(), value);
        }
    }
}

/// A problem+json error (RFC 9457) for a request we cannot serve because of the request
/// itself or the route: `detail` says what was wrong.
pub(crate) fn problem(status: StatusCode, detail: impl Into<String>) -> Response<Body> {
    Problem::new(status, detail).plain().response()
}

/// A request that cannot be served, for the problem+json answer built at the end.
#[derive(Debug)]
pub(crate) struct Problem {
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
}

impl Problem {
    pub(crate) fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            status,
            detail: detail.into(),
        }
    }

    pub(crate) fn response(self) -> Response<Body> {
        self.plain().response()
    }

    /// Its problem+json answer.
    pub(crate) fn plain(self) -> Plain {
        let body = serde_json::json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        Plain {
            status: self.status,
            kind: Some("application/problem+json"),
            headers: Vec::new(),
            body: body.to_string().into(),
        }
    }
}

/// A JSON response.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    json_bytes(status, value.to_string().into_bytes())
}

/// A JSON response from serialized bytes.
pub(crate) fn json_bytes(status: StatusCode, bytes: Vec<u8>) -> Response<Body> {
    Plain::json(status, bytes).response()
}

/// A body that keeps something alive (a concurrency permit, a place in flight) until the
/// body is done with: streamed to the end, or dropped when the client goes away. Generic
/// over the body it holds, so that a proxied answer is boxed once, with this around it.
pub(crate) struct Holding<B, T> {
    inner: B,
    _held: T,
}

impl<B, T> Holding<B, T> {
    pub(crate) fn new(inner: B, held: T) -> Self {
        Self { inner, _held: held }
    }
}

impl<B, T: Unpin> HttpBody for Holding<B, T>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
