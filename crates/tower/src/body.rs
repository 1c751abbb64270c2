//! The layer's response body: the service's own, holding the request's concurrency permit
//! until it is done, or a buffer for an answer the layer gives itself.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::grpc;
use ratewarden_policy::PermitGuard;

pin_project! {
    /// The body of a response through [`RateLimit`](crate::RateLimit): the inner service's
    /// body (holding the request's concurrency permit until it has been sent or dropped),
    /// or the layer's own answer (a 429, a 503, a 400).
    pub struct LimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            permit: Option<PermitGuard>,
        },
        Full {
            data: Option<Bytes>,
        },
    }
}

impl<B> LimitBody<B> {
    pub(crate) fn inner(body: B, permit: Option<PermitGuard>) -> Self {
        Self {
            kind: Kind::Inner { body, permit },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for LimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body, permit } => {
                let frame = body.poll_frame(cx);
                // A gRPC call's status comes in its trailers: a server failure there is a
                // drop, as a 5xx is.
                if let Poll::Ready(Some(Ok(f))) = &frame {
                    let failed = f.trailers_ref().is_some_and(grpc::is_server_failure);
                    if let (true, Some(permit)) = (failed, permit.as_mut()) {
                        if let Some(completion) = permit.completion.as_mut() {
                            completion.dropped = true;
                        }
                    }
                }
                // Sent to the end: the permit goes back now, not when the connection
                // gets round to dropping the body.
                if let Poll::Ready(None) = frame {
                    permit.take();
                }
                frame
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
