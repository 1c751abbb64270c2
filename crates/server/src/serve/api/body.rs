//! A decision API body, read within `[server] max_body` and `api_body_timeout` and parsed
//! as JSON, with the 4xx of each way it can fail.

use std::future::Future;
use std::task::Poll;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::body::Incoming;
use ratewarden_core::DisplayDuration;
use ratewarden_policy::ServerSettings;

use crate::serve::reply::Problem;

/// The body, within `[server] max_body`, as JSON.
pub(crate) async fn read_json(
    settings: &ServerSettings,
    request: Request<Incoming>,
    strict: bool,
) -> Result<Bytes, Problem> {
    if strict {
        json_content_type(request.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()))?;
    }
    let (max, timeout) = (settings.max_body, settings.bounds.api_body_timeout);
    // A declared length over the bound is refused before a byte of the body is read (hyper
    // has read `Content-Length` into the body's exact size already).
    let body = request.into_body();
    if let Some(length) = body.size_hint().exact() {
        declared_length(length, max)?;
    }
    let mut read = std::pin::pin!(read_to_end(body, max));
    // The timer is armed only for a body that is not there at once. hyper hands a body over
    // only once it is asked for, so the first poll always waits; it wakes this task again
    // (as asking for the body does), and a body still missing at the second poll, a moment
    // later, gets `timeout` from then. A body that came with its head, nearly every one,
    // costs no timer (arming and dropping one is a measurable share of a request's cost).
    let mut polls = 0;
    let early = std::future::poll_fn(|cx| match read.as_mut().poll(cx) {
        Poll::Ready(read) => Poll::Ready(Some(read)),
        Poll::Pending if polls == 0 => {
            polls += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        Poll::Pending => Poll::Ready(None),
    })
    .await;
    let timed = match early {
        Some(read) => Ok(read),
        None => tokio::time::timeout(timeout, read).await,
    };
    let Ok(read) = timed else {
        return Err(body_timed_out(timeout));
    };
    match read {
        Ok(body) => Ok(body),
        Err(BodyError::TooLarge) => Err(too_large(max)),
        Err(BodyError::Read(error)) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            format!("the body could not be read: {error}"),
        )),
    }
}

/// The 415 of a body that is not JSON, from its `Content-Type` (absent: taken as JSON).
/// Shared by hyper's path and the lean one (`lean.rs`).
pub(crate) fn json_content_type(kind: Option<&[u8]>) -> Result<(), Problem> {
    let Some(kind) = kind else {
        return Ok(());
    };
    // As `HeaderValue::to_str` reads it: visible ASCII, else nothing.
    let kind = if kind
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) || b == b'\t')
    {
        std::str::from_utf8(kind).unwrap_or("")
    } else {
        ""
    };
    let essence = kind.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("the body must be `application/json`, not `{kind}`"),
        ))
    }
}

/// The 413 of a declared `Content-Length` over `max`, before a byte of the body is read.
pub(crate) fn declared_length(length: u64, max: usize) -> Result<(), Problem> {
    if length > max as u64 {
        Err(too_large(max))
    } else {
        Ok(())
    }
}

/// The 408 of a body that did not arrive within `[server] api_body_timeout`.
pub(crate) fn body_timed_out(timeout: std::time::Duration) -> Problem {
    Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the body did not arrive within {} (`[server] api_body_timeout`)",
            DisplayDuration(timeout)
        ),
    )
}

/// Why a body could not be read whole.
enum BodyError {
    /// It is over the bound.
    TooLarge,
    Read(hyper::Error),
}

/// `body` to its end, refused past `max` bytes. Kept as hyper hands it over when it comes
/// in one piece, as a small body nearly always does: no queue of pieces and no copy, where
/// http-body-util's `Limited` and `Collect` queue every piece first.
async fn read_to_end(mut body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    let mut first = Bytes::new();
    let mut joined = Vec::new();
    while let Some(frame) = body.frame().await {
        // Trailers are not part of the body.
        let Ok(data) = frame.map_err(BodyError::Read)?.into_data() else {
            continue;
        };
        let read = first.len() + joined.len() + data.len();
        if read > max {
            return Err(BodyError::TooLarge);
        }
        if first.is_empty() && joined.is_empty() {
            first = data;
        } else {
            if joined.is_empty() {
                joined.reserve(read);
                joined.extend_from_slice(&std::mem::take(&mut first));
            }
            joined.extend_from_slice(&data);
        }
    }
    Ok(if joined.is_empty() {
        first
    } else {
        Bytes::from(joined)
    })
}

fn too_large(max: usize) -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is over {max} bytes (`[server] max_body`)"),
    )
}
