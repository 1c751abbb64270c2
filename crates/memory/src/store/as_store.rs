//! The store behind [`ratewarden_core::Store`], the interface every store offers.

use std::convert::Infallible;
use std::hash::BuildHasher;

use ratewarden_core::lease::Ask;
use ratewarden_core::{Check, Decision, Limit, Store};

use super::MemoryStore;

impl<S: BuildHasher> Store for MemoryStore<Limit, S> {
    type Error = Infallible;

    fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Infallible> {
        Ok(MemoryStore::decide(self, limit, key, now, cost))
    }

    fn decide_all(&self, checks: &[Check<'_>], now: u64) -> Result<Vec<Decision>, Infallible> {
        // The common case, one rule, without the vector of layers.
        if let [c] = checks {
            return Ok(vec![MemoryStore::decide(self, c.limit, c.key, now, c.cost)]);
        }
        let layers: Vec<(&Limit, &str, u64)> =
            checks.iter().map(|c| (c.limit, c.key, c.cost)).collect();
        Ok(MemoryStore::decide_all(self, &layers, now))
    }

    fn peek(&self, limit: &Limit, key: &str, now: u64, cost: u64) -> Result<Decision, Infallible> {
        Ok(MemoryStore::peek(self, limit, key, now, cost))
    }

    fn settle(&self, limit: &Limit, key: &str, now: u64, delta: i64) -> Result<(), Infallible> {
        MemoryStore::settle(self, limit, key, now, delta);
        Ok(())
    }

    fn acquire(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Result<u64, Decision>, Infallible> {
        Ok(self.acquire_id(limit, key, now, cost))
    }

    fn release(&self, limit: &Limit, key: &str, id: u64) -> Result<bool, Infallible> {
        Ok(MemoryStore::release(self, limit, key, id))
    }

    fn clear(&self, key: &str) -> Result<bool, Infallible> {
        Ok(MemoryStore::clear(self, key))
    }

    fn lease(&self, key: &str, ask: Ask<'_>, now: u64) -> Result<u64, Infallible> {
        Ok(MemoryStore::lease(self, key, ask, now))
    }
}
