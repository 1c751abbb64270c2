//! The store behind [`ratewarden_core::AsyncStore`], the interface every shared store offers.

use ratewarden_core::lease::Ask;
use ratewarden_core::{AsyncStore, Check, Decision, Limit};

use super::call::Mode;
use super::{RedisError, RedisStore};

impl AsyncStore for RedisStore {
    type Error = RedisError;

    fn is_shared(&self) -> bool {
        true
    }

    async fn decide(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, RedisError> {
        self.one(Mode::Decide, limit, key, cost, now).await
    }

    async fn decide_all(
        &self,
        checks: &[Check<'_>],
        now: u64,
    ) -> Result<Vec<Decision>, RedisError> {
        self.decide_replicated(checks, now, 0).await
    }

    async fn decide_replicated(
        &self,
        checks: &[Check<'_>],
        now: u64,
        replicas: u32,
    ) -> Result<Vec<Decision>, RedisError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let checks: Vec<(&Limit, &str, i128)> = checks
            .iter()
            .map(|c| (c.limit, c.key, i128::from(c.cost)))
            .collect();
        self.run_replicated(Mode::Decide, &checks, now, replicas)
            .await
    }

    async fn peek(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
    ) -> Result<Decision, RedisError> {
        self.one(Mode::Peek, limit, key, cost, now).await
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        delta: i64,
    ) -> Result<(), RedisError> {
        self.run(Mode::Settle, &[(limit, key, i128::from(delta))], now)
            .await
            .map(drop)
    }

    async fn take(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        want: u64,
    ) -> Result<(u64, Decision), RedisError> {
        self.take_up_to(limit, key, now, want).await
    }

    async fn lease(&self, key: &str, ask: Ask<'_>, now: u64) -> Result<u64, RedisError> {
        self.lease_of(key, ask, now).await
    }

    async fn clear(&self, key: &str) -> Result<bool, RedisError> {
        let redis_key = self.redis_key(key);
        self.guarded(async {
            let mut connection = self.connection().await?;
            let removed: u64 =
                Self::query(&mut connection, redis::cmd("DEL").arg(&redis_key)).await?;
            Ok(removed > 0)
        })
        .await
    }
}

impl RedisStore {
    /// `mode` over one check: its decision.
    async fn one(
        &self,
        mode: Mode,
        limit: &Limit,
        key: &str,
        cost: u64,
        now: u64,
    ) -> Result<Decision, RedisError> {
        let mut d = self
            .run(mode, &[(limit, key, i128::from(cost))], now)
            .await?;
        d.pop()
            .ok_or_else(|| RedisError::Protocol("no decision".to_owned()))
    }
}
