//! Leased shares of fleet budgets: the script's `share` mode (the wire name of the store's
//! `lease`, kept so processes of two versions share their budgets), over a hash per budget.

use ratewarden_core::lease::Ask;

use super::{RedisError, RedisStore};

impl RedisStore {
    /// Leases `ask.member` its share of the budget `key` in one script call (mode `share`,
    /// `lease.lua`): the units granted. The budget's hash is `key` with a `share:` before it,
    /// apart from the limiters' state.
    pub(super) async fn lease_of(
        &self,
        key: &str,
        ask: Ask<'_>,
        now: u64,
    ) -> Result<u64, RedisError> {
        let ask = ask.bounded();
        self.guarded(async {
            let keys = [self.redis_key(&format!("share:{key}"))];
            let args = [
                "share".to_owned(),
                self.time_arg(now),
                ask.member.to_owned(),
                ask.want.to_string(),
                ask.weight.to_string(),
                ask.capacity.to_string(),
                ask.ttl_ms.to_string(),
            ];
            let mut connection = self.connection().await?;
            let granted: u64 = self.invoke(&mut connection, &keys, &args, 0).await?;
            if granted > ask.want.min(ask.capacity) {
                return Err(RedisError::Protocol(format!(
                    "lease: {granted} granted of {} wanted (capacity {})",
                    ask.want, ask.capacity
                )));
            }
            Ok(granted)
        })
        .await
    }
}
