//! The method a gateway request asks the upstream to serve it as: an override header, or
//! a `_method` parameter in its query or its `POST` body (`ratewarden_policy::
//! method_override` reads the parameter as Rails, Laravel and Symfony do).
//!
//! Under `[server] method_override = "refuse"` (the default) a request that names another
//! method than its own is refused with 400; under `"decide"` a `POST` is decided as the
//! method it names (the frameworks override only a `POST`) and forwarded as sent, and any
//! other method naming another is still refused. A body is read for `_method` up to
//! `method_override_scan` bytes before deciding; past them it streams on, still read, and
//! is cut (400) where it names another method than the one decided on.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::request::Parts;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use ratewarden_policy::method_override::{body_kinds, in_query, may_name_method, Scan};
use ratewarden_policy::{MethodOverride, ServerSettings};

use crate::serve::gateway::sent_body::{self, Fault, LateOverride};
use crate::serve::guard;
use crate::serve::reply::{BoxError, Plain, Problem};

/// Where a request named a method.
struct Named {
    /// The header, or the parameter and where it was, for the answer.
    source: String,
    method: String,
}

/// The most of a request's body read before deciding when a rule estimates its cost from
/// it (`cost = "json:max_tokens + bytes/4"`): a long prompt is a few hundred kilobytes. A
/// longer body is decided without it (such a rule charges its `max_cost`).
pub(crate) const MAX_DECIDED_BODY: usize = 1024 * 1024;

/// The method to decide `parts` as, and its body (read in part, the rest to stream): or
/// the 4xx refusing it. With `for_rules`, a rule reads the body: it is read up to
/// [`MAX_DECIDED_BODY`] rather than `method_override_scan`.
pub(crate) async fn read<B>(
    parts: &Parts,
    mut body: B,
    settings: &ServerSettings,
    for_rules: bool,
) -> Result<(Method, Scanned<B>), Plain>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    let mut named: Vec<Named> = Vec::new();
    // Otherwise the guard has refused a header naming another method, and one naming this
    // one changes nothing.
    if settings.method_override == MethodOverride::Decide && parts.method == Method::POST {
        named.extend(
            guard::override_headers(&parts.headers).map(|(name, method)| Named {
                source: format!("`{name}: {method}`"),
                method,
            }),
        );
    }
    if let Some(query) = parts.uri.query().filter(|q| may_name_method(q)) {
        named.extend(in_query(query).into_iter().map(|method| Named {
            source: format!("`_method={method}` in the query"),
            method,
        }));
    }
    let bound = if for_rules {
        settings.method_override_scan.max(MAX_DECIDED_BODY)
    } else {
        settings.method_override_scan
    };
    let (mut prefix, mut trailers, mut scanning, mut whole) = (None, None, None, false);
    if parts.method == Method::POST && !body.is_end_stream() {
        let types = parts
            .headers
            .get_all(header::CONTENT_TYPE)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>();
        let kinds = body_kinds(types.iter().map(String::as_str));
        if !kinds.is_empty() {
            let mut scan = Scan::new(&kinds);
            let mut read = BytesMut::new();
            let mut ended = false;
            while read.len() < bound {
                match body.frame().await {
                    None => {
                        ended = true;
                        break;
                    }
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => {
                            scan.feed(&data);
                            read.extend_from_slice(&data);
                        }
                        Err(frame) => {
                            trailers = frame.into_trailers().ok();
                            ended = true;
                            break;
                        }
                    },
                    Some(Err(error)) => {
                        return Err(match sent_body::fault(&*error) {
                            Fault::Slow(why) => Problem::new(StatusCode::REQUEST_TIMEOUT, why),
                            Fault::Broken(why) => Problem::new(StatusCode::BAD_REQUEST, why),
                        }
                        .plain());
                    }
                }
            }
            // A body of known length may have come whole without its end being read.
            ended |= body.is_end_stream();
            if ended {
                scan.finish();
            }
            if let Some(why) = scan.unreadable() {
                return Err(unknowable(why));
            }
            named.extend(scan.found().iter().map(|method| Named {
                source: format!("`_method={method}` in the body"),
                method: method.clone(),
            }));
            prefix = Some(read.freeze()).filter(|p| !p.is_empty());
            scanning = (!ended).then_some(scan);
            whole = ended;
        }
    }
    let decided = decide(&parts.method, &named, settings.method_override)?;
    let scanned = Scanned {
        prefix,
        trailers,
        rest: Some(body),
        scan: scanning,
        decided: decided.clone(),
        bound,
        whole,
    };
    Ok((decided, scanned))
}

/// The method to decide a request sent as `method` as, given the methods it `named`.
fn decide(method: &Method, named: &[Named], mode: MethodOverride) -> Result<Method, Plain> {
    let sent = method.as_str();
    let mut other = named
        .iter()
        .filter(|n| !n.method.eq_ignore_ascii_case(sent));
    let Some(first) = other.next() else {
        // The usual case, and no allocation: a standard method is a constant.
        return Ok(method.clone());
    };
    let bad = |detail: String| Err(Problem::new(StatusCode::BAD_REQUEST, detail).plain());
    if mode == MethodOverride::Refuse || sent != "POST" {
        let why = if mode == MethodOverride::Refuse {
            "the gateway refuses method overrides (`[server] method_override = \"refuse\"`)"
        } else {
            "frameworks override only a POST"
        };
        return bad(format!(
            "{} would make this {sent} a {} upstream; send that method ({why})",
            first.source, first.method
        ));
    }
    // Frameworks disagree on which comes first (Rack: the parameter; Symfony: the header,
    // then the body, then the query): two different methods named, this one among them,
    // have no one meaning.
    if let Some(second) = named.iter().find(|n| n.method != first.method) {
        return bad(format!(
            "{} and {} name two different methods; send one",
            first.source, second.source
        ));
    }
    Method::from_bytes(first.method.as_bytes()).or_else(|_| {
        bad(format!(
            "{} names no HTTP method; send the method it means",
            first.source
        ))
    })
}

/// The answer to a body whose `_method` cannot be known.
fn unknowable(why: &str) -> Plain {
    Problem::new(
        StatusCode::BAD_REQUEST,
        format!("{why}: whether it names another method (`_method`) cannot be read"),
    )
    .plain()
}

/// A body the gateway has read the start of: that start, then the rest as it comes, read
/// on for `_method` when the start did not end it.
pub(crate) struct Scanned<B> {
    prefix: Option<Bytes>,
    trailers: Option<HeaderMap>,
    rest: Option<B>,
    scan: Option<Scan>,
    /// The method the request was decided as.
    decided: Method,
    /// The bytes read before deciding, for the error.
    bound: usize,
    /// The body was read to its end before deciding.
    whole: bool,
}

impl<B> Scanned<B> {
    /// The whole body, when it was read to its end before deciding (a form, multipart or
    /// JSON `POST` within the bound): what a rule estimating its cost from it reads.
    pub(crate) fn whole(&self) -> Option<&[u8]> {
        self.whole
            .then(|| self.prefix.as_deref().unwrap_or_default())
    }

    /// The error cutting the body, if what was read of it names another method than the
    /// one decided on, or cannot be read.
    fn check(&self) -> Option<BoxError> {
        let scan = self.scan.as_ref()?;
        if let Some(why) = scan.unreadable() {
            return Some(Box::new(LateOverride(format!(
                "{why}, past the first {} bytes read before deciding",
                self.bound
            ))));
        }
        let other = scan
            .found()
            .iter()
            .find(|m| !m.eq_ignore_ascii_case(self.decided.as_str()))?;
        Some(Box::new(LateOverride(format!(
            "the body names `_method={other}` past the first {} bytes read before deciding \
             it as {}; send the method it means",
            self.bound, self.decided
        ))))
    }
}

impl<B> HttpBody for Scanned<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(prefix) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        if let Some(trailers) = this.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        let Some(rest) = this.rest.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut *rest).poll_frame(cx);
        if let Some(scan) = this.scan.as_mut() {
            match &polled {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        scan.feed(data);
                    }
                    // A body of known length is not asked again once it has it all: its
                    // last parameter is read now.
                    if rest.is_end_stream() {
                        scan.finish();
                    }
                }
                Poll::Ready(None) => scan.finish(),
                _ => {}
            }
            if matches!(polled, Poll::Ready(Some(Ok(_)) | None)) {
                if let Some(error) = this.check() {
                    // Read no further: the upstream gets a body cut short, never acted on.
                    this.rest = None;
                    this.scan = None;
                    return Poll::Ready(Some(Err(error)));
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let prefix = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint);
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + prefix);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + prefix);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(pairs: &[(&str, &str)]) -> Vec<Named> {
        pairs
            .iter()
            .map(|(source, method)| Named {
                source: (*source).to_owned(),
                method: (*method).to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_post_is_decided_as_the_one_method_it_names_only_when_told_to() {
        let delete = named(&[("header", "DELETE"), ("body", "DELETE")]);
        assert_eq!(
            decide(&Method::POST, &delete, MethodOverride::Decide).unwrap(),
            "DELETE"
        );
        assert!(decide(&Method::POST, &delete, MethodOverride::Refuse).is_err());
        assert!(decide(&Method::GET, &delete, MethodOverride::Decide).is_err());
        let two = named(&[("header", "DELETE"), ("body", "PUT")]);
        assert!(decide(&Method::POST, &two, MethodOverride::Decide).is_err());
        // Symfony would serve the header's POST, Rack the parameter's DELETE.
        let own_and_other = named(&[("header", "POST"), ("query", "DELETE")]);
        assert!(decide(&Method::POST, &own_and_other, MethodOverride::Decide).is_err());
        let same = named(&[("query", "POST")]);
        assert_eq!(
            decide(&Method::POST, &same, MethodOverride::Refuse).unwrap(),
            "POST"
        );
        // A name no method has is refused, never forwarded as a method decided on.
        let garbled = named(&[("body", "DEL ETE")]);
        assert!(decide(&Method::POST, &garbled, MethodOverride::Decide).is_err());
    }
}
