//! A partial grant: up to k units of one key in one script call, for prefetched allowances.

use ratewarden_core::{Decision, Limit};

use super::{RedisError, RedisStore};
use crate::encode;

impl RedisStore {
    /// Takes up to `want` units of `key` under `limit`, as many as fit now, atomically
    /// (the script's `take` mode): the units granted and the decision of charging them, or
    /// the refusal of one unit when none fit.
    pub(super) async fn take_up_to(
        &self,
        limit: &Limit,
        key: &str,
        now: u64,
        want: u64,
    ) -> Result<(u64, Decision), RedisError> {
        self.guarded(async {
            let keys = [self.redis_key(key)];
            let mut args: Vec<String> = Vec::with_capacity(11);
            args.push("take".to_owned());
            args.push(self.time_arg(now));
            args.push("1".to_owned());
            encode::push_check(&mut args, limit, &want.to_string(), now);
            let mut connection = self.connection().await?;
            let mut reply: Vec<String> = self.invoke(&mut connection, &keys, &args, 0).await?;
            let granted = reply
                .pop()
                .ok_or_else(|| RedisError::Protocol("take: an empty reply".to_owned()))?;
            let granted: u64 = granted
                .parse()
                .map_err(|_| RedisError::Protocol(format!("take: granted `{granted}`")))?;
            let (_now, mut decisions) = encode::decode(&reply).map_err(RedisError::Protocol)?;
            match (decisions.pop(), decisions.is_empty()) {
                (Some(decision), true) if granted <= want => Ok((granted, decision)),
                _ => Err(RedisError::Protocol(format!(
                    "take: {granted} granted of {want}, or not one decision"
                ))),
            }
        })
        .await
    }
}
