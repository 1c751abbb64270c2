//! The decision API's JSON bodies as the engine reads them: a check (`CheckBody`, read by
//! hand when plain in `check_json`), the client a body names (`subject`), and any body with
//! the 400 or 422 it earns. Below the doors: `/v1/check`, `/v1/settle`, the admin listener's
//! `POST /v1/explain` and `ratewarden explain` all read a body the same way.

mod check_json;
pub(crate) mod subject;

use std::net::SocketAddr;

use http::StatusCode;
use serde::Deserialize;

use crate::serve::reply::Problem;
use subject::{subject, Resolved, Subject};

pub(crate) use check_json::CheckJson;

/// The most a caller may claim one request costs.
pub(crate) const MAX_COST: u64 = 1_000_000_000;

/// A `/v1/check` body: by hand when it is plain (`check_json`), else as [`parse`] reads it.
pub(crate) fn parse_check(body: &[u8]) -> Result<CheckJson<'_>, Problem> {
    match check_json::read(body) {
        Some(check) => Ok(check),
        None => parse(body),
    }
}

/// A `/v1/check` body read and checked exactly as `/v1/check` reads it: what `explain`
/// (the command and the admin listener's `POST /v1/explain`) takes.
pub(crate) struct CheckBody<'a>(CheckJson<'a>);

/// A [`CheckBody`]'s request, its defaults applied.
pub(crate) struct CheckRequest<'a> {
    resolved: Resolved<'a>,
    cost: Option<u64>,
}

impl<'a> CheckBody<'a> {
    /// The body, or the 4xx `/v1/check` would answer it with.
    pub(crate) fn parse(body: &'a [u8]) -> Result<Self, Problem> {
        let check = parse_check(body)?;
        if let Some(cost) = check.cost.filter(|&c| c > MAX_COST) {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("`cost` is {cost}; it must be at most {MAX_COST}"),
            ));
        }
        Ok(Self(check))
    }

    /// Its fields checked, with `peer` the client when it names no `ip`.
    pub(crate) fn resolve(&self, peer: SocketAddr) -> Result<CheckRequest<'_>, Problem> {
        Ok(CheckRequest {
            resolved: subject!(self.0).resolve(peer)?,
            cost: self.0.cost,
        })
    }
}

impl CheckRequest<'_> {
    /// What the engine is asked.
    pub(crate) fn request(&self) -> ratewarden_policy::Request<'_> {
        self.resolved.request(self.cost)
    }
}

pub(crate) fn too_costly(cost: u64) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("`cost` is {cost}; it must be at most {MAX_COST}"),
    )
}

/// `body` as JSON into `T`: a 400 for what is not JSON, a 422 for JSON that is not a `T`
/// (naming the field), each with words that say what a body must be.
pub(crate) fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Problem> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{')
        && serde_json::from_slice::<serde_json::Value>(body).is_ok()
    {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the body must be a JSON object, such as {\"ip\": \"203.0.113.7\", \"path\": \"/orders\"}",
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let status = if e.is_data() {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::BAD_REQUEST
        };
        let what = if e.is_eof() && body.iter().all(u8::is_ascii_whitespace) {
            "the body is empty; it must be a JSON object".to_owned()
        } else {
            format!("the body is not a valid request: {e}")
        };
        Problem::new(status, what)
    })
}
