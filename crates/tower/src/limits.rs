//! The engine behind a layer, with its store type erased, so that `RateLimit<S>` is one
//! type whatever the store (memory, Redis, Redis Cluster): how a request's limits are found
//! (the rules of a config, or limits written in code), and settles and releases.

use std::borrow::Cow;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use http::request::Parts;
use http::StatusCode;
use ratewarden_core::adaptive::Completion;
use ratewarden_core::AsyncStore;
use ratewarden_policy::{Engine, GrantId, Owner, SettleError, Timer, Verdict};

use crate::keyed::KeyedLimit;

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A request the limits cannot read: answered with `status` and `detail`, never decided.
#[derive(Debug)]
pub(crate) struct Unreadable {
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
}

/// Deciding, settling and releasing, whatever the store.
pub(crate) trait Limits: Send + Sync + 'static {
    /// The verdict on `request` from `peer` at `timer`'s now (a request an adaptive rule
    /// with a queue has no place for waits its turn on `timer`); `None` when no limit
    /// applies.
    fn decide<'a>(
        &'a self,
        request: &'a Parts,
        peer: IpAddr,
        timer: &'a dyn Timer,
    ) -> BoxFuture<'a, Result<Option<Verdict>, Unreadable>>;

    /// Settles reservation `id` at `actual`.
    fn settle<'a>(
        &'a self,
        id: GrantId,
        owner: &'a Verdict,
        actual: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<(), SettleError>>;

    /// Releases permit `id` (a lapsed or unknown permit is no error here: the lease let
    /// it go), telling its adaptive rules how the request went when it is known.
    fn release(
        self: Arc<Self>,
        id: GrantId,
        owner: Arc<Verdict>,
        completion: Option<Completion>,
        now: u64,
    ) -> BoxFuture<'static, ()>;

    /// Whether answers carry the legacy `X-RateLimit-*` trio.
    fn legacy(&self) -> bool;
}

/// The engine behind a layer, and where its requests' limits come from.
pub(crate) struct EngineLimits<St> {
    pub(crate) engine: Arc<Engine<St>>,
    pub(crate) source: Source,
}

/// Where a request's limits come from.
pub(crate) enum Source {
    /// The rules of a `ratewarden-policy` config, decided as the gateway decides them;
    /// `[server] legacy_headers` read once (the config is not cloned per request).
    Rules { legacy: bool },
    /// Limits written in code: the rules of an engine of their own, in the same order,
    /// decided by [`Engine::decide_keyed`] on the keys their closures build.
    Keyed(Vec<KeyedLimit>),
}

impl<St: AsyncStore + 'static> EngineLimits<St> {
    /// The verdict on a request as the gateway decides it: normalized path, headers, host.
    async fn decide_rules(
        &self,
        request: &Parts,
        peer: IpAddr,
        timer: &dyn Timer,
    ) -> Result<Verdict, Unreadable> {
        // What is matched is one spelling of the path, as at the gateway: a rule on `/login`
        // also sees `//login` and `/%6Cogin`.
        let path =
            ratewarden_policy::path::normalize(request.uri.path()).map_err(|e| Unreadable {
                status: StatusCode::BAD_REQUEST,
                detail: e.to_string(),
            })?;
        let headers = ratewarden_policy::parts::header_pairs(&request.headers);
        let host = ratewarden_policy::parts::host(request);
        let engine_request = ratewarden_policy::Request {
            peer,
            method: request.method.as_str(),
            path: &path,
            host,
            headers: &headers,
            cost: None,
            api_key: None,
            tenant: None,
            body: None,
            client_cert: None,
        };
        // A layer holds the request as the gateway does: it may wait in a rule's queue.
        self.engine
            .decide_waiting(&engine_request, timer)
            .await
            .map_err(|e| Unreadable {
                status: if e.is_malformed() {
                    StatusCode::BAD_REQUEST
                } else {
                    StatusCode::UNPROCESSABLE_ENTITY
                },
                detail: e.to_string(),
            })
    }

    /// The verdict on a request under limits written in code; `None` when none applies.
    async fn decide_keyed(
        &self,
        limits: &[KeyedLimit],
        request: &Parts,
        now: u64,
    ) -> Result<Option<Verdict>, Unreadable> {
        // The engine's rules are the limits, in order (it is never reloaded).
        if let [limit] = limits {
            // One limit, the usual layer: no vector of keys.
            let Some((key, cost)) = key_and_cost(limit, request)? else {
                return Ok(None);
            };
            return Ok(Some(self.engine.decide_keyed(&[(0, key, cost)], now).await));
        }
        let mut keys = Vec::with_capacity(limits.len());
        for (i, limit) in limits.iter().enumerate() {
            if let Some((key, cost)) = key_and_cost(limit, request)? {
                keys.push((i, key, cost));
            }
        }
        if keys.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.engine.decide_keyed(&keys, now).await))
    }
}

/// A request's key and cost under `limit`; `None` when its key closure finds no key (the
/// limit does not apply).
fn key_and_cost(
    limit: &KeyedLimit,
    request: &Parts,
) -> Result<Option<(Cow<'static, str>, u64)>, Unreadable> {
    let key = match &limit.key {
        Some(key) => match key(request) {
            Some(key) => Cow::Owned(key),
            None => return Ok(None),
        },
        None => Cow::Borrowed("*"),
    };
    let cost = match &limit.cost {
        Some(cost) => cost(request).map_err(|reason| Unreadable {
            status: StatusCode::BAD_REQUEST,
            detail: format!("limit `{}`: {reason}", limit.name),
        })?,
        None => 1,
    };
    Ok(Some((key, cost)))
}

impl<St: AsyncStore + 'static> Limits for EngineLimits<St> {
    fn decide<'a>(
        &'a self,
        request: &'a Parts,
        peer: IpAddr,
        timer: &'a dyn Timer,
    ) -> BoxFuture<'a, Result<Option<Verdict>, Unreadable>> {
        match &self.source {
            Source::Rules { .. } => {
                Box::pin(async move { self.decide_rules(request, peer, timer).await.map(Some) })
            }
            Source::Keyed(limits) => Box::pin(self.decide_keyed(limits, request, timer.now())),
        }
    }

    fn settle<'a>(
        &'a self,
        id: GrantId,
        owner: &'a Verdict,
        actual: u64,
        now: u64,
    ) -> BoxFuture<'a, Result<(), SettleError>> {
        // The verdict that carried the id, kept in this process: the id alone claims nothing.
        Box::pin(self.engine.settle(id, Owner::Verdict(owner), actual, now))
    }

    fn release(
        self: Arc<Self>,
        id: GrantId,
        owner: Arc<Verdict>,
        completion: Option<Completion>,
        now: u64,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let owner = Owner::Verdict(&owner);
            let _ = match completion {
                Some(c) => self.engine.release_with(id, owner, c, now).await,
                None => self.engine.release(id, owner, now).await,
            };
        })
    }

    fn legacy(&self) -> bool {
        matches!(self.source, Source::Rules { legacy: true })
    }
}
