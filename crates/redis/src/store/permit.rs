//! Concurrency permits in Redis: taken and given back by id.

use ratewarden_core::{Decision, Limit};

use super::{RedisError, RedisStore};
use crate::encode;

impl RedisStore {
    /// Takes a concurrency permit of `cost` units for `key` under `id` (a non-zero id
    /// unique to the holder: zero is the anonymous holder of settled units): `Ok(Ok(()))`
    /// when granted, the decision when not. Under a limit that is not a concurrency limit
    /// this is a decision.
    ///
    /// # Errors
    ///
    /// Redis failed, was too slow, or the breaker is open.
    pub async fn acquire(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        cost: u64,
        id: u64,
    ) -> Result<Result<(), Decision>, RedisError> {
        self.guarded(async {
            let mut connection = self.connection().await?;
            let mut args = vec!["acquire".to_owned(), self.time_arg(now), "1".to_owned()];
            args.push(id.to_string());
            encode::push_check(&mut args, limit, &cost.to_string(), now);
            let reply: Vec<String> = self
                .invoke(&mut connection, &[self.redis_key(key)], &args, 0)
                .await?;
            let (_, mut decisions) = encode::decode(&reply).map_err(RedisError::Protocol)?;
            let decision = decisions
                .pop()
                .ok_or_else(|| RedisError::Protocol("no decision".to_owned()))?;
            Ok(if decision.is_allowed() {
                Ok(())
            } else {
                Err(decision)
            })
        })
        .await
    }

    /// Gives back permit `id` of `key`; false if it was not held (released, or lapsed).
    ///
    /// # Errors
    ///
    /// Redis failed, was too slow, or the breaker is open.
    pub async fn release(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        id: u64,
    ) -> Result<bool, RedisError> {
        self.guarded(async {
            let mut connection = self.connection().await?;
            let mut args = vec!["release".to_owned(), self.time_arg(now), "1".to_owned()];
            args.push(id.to_string());
            encode::push_check(&mut args, limit, "0", now);
            let reply: Vec<String> = self
                .invoke(&mut connection, &[self.redis_key(key)], &args, 0)
                .await?;
            match reply.get(1).map(String::as_str) {
                Some("1") => Ok(true),
                Some("0") => Ok(false),
                other => Err(RedisError::Protocol(format!("release answered {other:?}"))),
            }
        })
        .await
    }
}
