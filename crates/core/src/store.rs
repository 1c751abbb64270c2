//! What every keyed store offers: the interface the in-memory store and shared stores share,
//! and that one conformance suite checks.

use std::future::Future;

use crate::lease::Ask;
use crate::{Decision, Limit};

/// One limit of a layered decision: which limit, for which key, at what cost.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// The key its state is kept under; it should name the limit too (a rule name and the
    /// key parts), since a store holds the states of every limit in one key space.
    pub key: &'a str,
    /// The request's cost under this limit.
    pub cost: u64,
}

/// A store of per-key limiter state: decisions, layered decisions, peeks, settles and
/// concurrency permits, each atomic per call.
///
/// Being limited is a [`Decision`], not an error: `Err` is for a store that failed (a shared
/// store that is down or too slow), which callers answer with each rule's failure policy.
pub trait Store {
    /// Why a call failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Decides a request of `cost` under `limit` for `key` at `now`, charging it if allowed.
    fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Self::Error>;

    /// Decides a request against every check at once, all or nothing: if any rejects, none
    /// is charged. Returns every check's decision, in order.
    fn decide_all(&self, checks: &[Check<'_>], now: u64) -> Result<Vec<Decision>, Self::Error>;

    /// What [`decide`](Store::decide) would answer, charging nothing.
    fn peek(&self, limit: &Limit, key: &str, now: u64, cost: u64) -> Result<Decision, Self::Error>;

    /// Charges (or, negative, refunds) `delta` units without a decision.
    fn settle(&self, limit: &Limit, key: &str, now: u64, delta: i64) -> Result<(), Self::Error>;

    /// Takes a concurrency permit of `cost` units for `key`: its id when granted, the
    /// decision when not. Under a limit that is not a concurrency limit this is a decision,
    /// and the id releases nothing.
    fn acquire(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Result<u64, Decision>, Self::Error>;

    /// Gives back permit `id` of `key`; false if it was not held (released, or lapsed).
    fn release(&self, limit: &Limit, key: &str, id: u64) -> Result<bool, Self::Error>;

    /// Forgets `key`'s state, as if it had never been seen (an operator's reset); true if
    /// there was one.
    fn clear(&self, key: &str) -> Result<bool, Self::Error>;

    /// Leases `ask.member` its share of the budget `key` at `now`, as
    /// [`Leases::lease`](crate::lease::Leases::lease) grants it: the units granted. This
    /// default serves a fleet of one: what it wants, up to the capacity. A store several
    /// processes share keeps every member's lease.
    fn lease(&self, key: &str, ask: Ask<'_>, now: u64) -> Result<u64, Self::Error> {
        let _ = (key, now);
        Ok(ask.alone())
    }
}

/// The store interface as the policy engine uses it: every call may wait (a shared store is
/// a network away). Every [`Store`] is one, answering at once; a shared store implements
/// this trait directly.
pub trait AsyncStore: Send + Sync {
    /// Why a call failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// [`Store::decide`], awaited.
    fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Self::Error>> + Send;

    /// [`Store::decide_all`], awaited: all or nothing.
    fn decide_all(
        &self,
        checks: &[Check<'_>],
        now: u64,
    ) -> impl Future<Output = Result<Vec<Decision>, Self::Error>> + Send;

    /// [`decide_all`](AsyncStore::decide_all), answered only once `replicas` of the store's
    /// replicas hold what it charged: a decision a failover could lose (its master
    /// acknowledged it, then died before a replica had it) fails instead, and its rules'
    /// failure policies answer. A store without replicas (one in this process: there is no
    /// failover to lose a decision to) decides as `decide_all` does; this default is that.
    fn decide_replicated(
        &self,
        checks: &[Check<'_>],
        now: u64,
        replicas: u32,
    ) -> impl Future<Output = Result<Vec<Decision>, Self::Error>> + Send {
        let _ = replicas;
        self.decide_all(checks, now)
    }

    /// [`Store::peek`], awaited.
    fn peek(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Self::Error>> + Send;

    /// [`Store::settle`], awaited.
    fn settle(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        delta: i64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// [`Store::clear`], awaited.
    fn clear(&self, key: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Takes up to `want` units of `key` at once, as many as fit now: a partial grant, for
    /// an allowance a process spends locally. Returns the units granted and the decision of
    /// charging them, or, when none fit, the refusal of one unit (its retry time).
    ///
    /// This default asks [`peek`](AsyncStore::peek) how many fit, then charges them with
    /// [`decide`](AsyncStore::decide): never more than fits, but another caller between
    /// the two can make it grant nothing. A shared store answers in one atomic call.
    fn take(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        want: u64,
    ) -> impl Future<Output = Result<(u64, Decision), Self::Error>> + Send {
        async move {
            let room = self.peek(limit, key, now, 0).await?;
            let fits = if room.is_allowed() {
                want.min(room.remaining)
            } else {
                0
            };
            if fits == 0 {
                return Ok((0, self.peek(limit, key, now, 1).await?));
            }
            let decision = self.decide(limit, key, now, fits).await?;
            Ok((if decision.is_allowed() { fits } else { 0 }, decision))
        }
    }

    /// [`Store::lease`], awaited: `ask.member`'s leased share of the budget `key`. This
    /// default serves a fleet of one, as [`Store::lease`]'s does.
    fn lease(
        &self,
        key: &str,
        ask: Ask<'_>,
        now: u64,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send {
        let _ = (key, now);
        std::future::ready(Ok(ask.alone()))
    }

    /// Whether the state lives outside this process, shared with a fleet (and so may fail).
    /// The engine then also keeps, in process, what each `on_store_failure = "open"` or
    /// `"local"` rule admitted, so a store failure finds a bucket that already holds this
    /// process's recent traffic rather than a fresh one. False for an in-process store.
    fn is_shared(&self) -> bool {
        false
    }
}

impl<S: Store + Sync + Send> AsyncStore for S {
    type Error = S::Error;

    fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Self::Error>> + Send {
        std::future::ready(Store::decide(self, limit, key, now, cost))
    }

    fn decide_all(
        &self,
        checks: &[Check<'_>],
        now: u64,
    ) -> impl Future<Output = Result<Vec<Decision>, Self::Error>> + Send {
        std::future::ready(Store::decide_all(self, checks, now))
    }

    fn peek(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Self::Error>> + Send {
        std::future::ready(Store::peek(self, limit, key, now, cost))
    }

    fn settle(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        delta: i64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        std::future::ready(Store::settle(self, limit, key, now, delta))
    }

    fn clear(&self, key: &str) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        std::future::ready(Store::clear(self, key))
    }

    fn lease(
        &self,
        key: &str,
        ask: Ask<'_>,
        now: u64,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send {
        std::future::ready(Store::lease(self, key, ask, now))
    }
}

/// Runs a future that is ready at once, as every [`Store`]'s is through [`AsyncStore`]:
/// for synchronous callers (tests, benchmarks) of async code over an in-memory store.
///
/// # Panics
///
/// If the future is not ready when first polled (it waits on something: use a runtime).
pub fn now_or_panic<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => {
            panic!("now_or_panic: the future is waiting; run it on a runtime")
        }
    }
}
