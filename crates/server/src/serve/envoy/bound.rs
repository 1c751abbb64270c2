//! The gRPC listener's refusal of a message larger than `[envoy] max_message_bytes`, in
//! the terms of every other bound of a call: `INVALID_ARGUMENT` naming the setting.
//!
//! tonic's codec refuses such a message before decoding it, as `OUT_OF_RANGE` naming only
//! the sizes; no handler of ours answers `OUT_OF_RANGE`, so on this listener it is always
//! that refusal, renamed here on its way out.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderValue, Response};
use tower_service::Service;

/// The gRPC status header of a trailers-only answer (a refusal before any message).
const STATUS: &str = "grpc-status";
const MESSAGE: &str = "grpc-message";

/// `OUT_OF_RANGE`'s number, and `INVALID_ARGUMENT`'s.
const OUT_OF_RANGE: &str = "11";
const INVALID_ARGUMENT: &str = "3";

/// The service under the layer, renaming the codec's refusal.
#[derive(Clone)]
pub(super) struct NamedBound<S> {
    pub(super) inner: S,
    pub(super) max: usize,
}

impl<S, Req, B> Service<Req> for NamedBound<S>
where
    S: Service<Req, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let answer = self.inner.call(request);
        let max = self.max;
        Box::pin(async move {
            let mut response = answer.await?;
            rename(&mut response, max);
            Ok(response)
        })
    }
}

/// Renames a trailers-only `OUT_OF_RANGE` to `INVALID_ARGUMENT`, its message first naming
/// the setting, then the codec's (already percent-encoded, as gRPC sends messages).
fn rename<B>(response: &mut Response<B>, max: usize) {
    let headers = response.headers_mut();
    if headers.get(STATUS).and_then(|v| v.to_str().ok()) != Some(OUT_OF_RANGE) {
        return;
    }
    let codec = headers
        .get(MESSAGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let message = format!(
        "a message larger than `[envoy] max_message_bytes` ({max} bytes) is not read: {codec}"
    );
    headers.insert(STATUS, HeaderValue::from_static(INVALID_ARGUMENT));
    if let Ok(value) = HeaderValue::from_str(&message) {
        headers.insert(MESSAGE, value);
    }
}
