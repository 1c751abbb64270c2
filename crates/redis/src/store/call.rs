//! Script calls: one per decision on a server or within a Cluster slot, and layered
//! decisions across slots by reserve-then-refund.

use std::collections::HashMap;

use ratewarden_core::{Decision, Limit};

use super::connection::{Client, Connection};
use super::{RedisError, RedisStore};
use crate::{encode, slot};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Decide,
    Peek,
    Settle,
}

impl Mode {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Mode::Decide => "decide",
            Mode::Peek => "peek",
            Mode::Settle => "settle",
        }
    }
}

impl RedisStore {
    /// Runs `mode` over `checks` (`cost` is the delta for `settle`) behind the breaker and
    /// within the deadline.
    pub(super) async fn run(
        &self,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        now: u64,
    ) -> Result<Vec<Decision>, RedisError> {
        self.run_replicated(mode, checks, now, 0).await
    }

    /// [`RedisStore::run`], each script call answered only once `replicas` replicas hold
    /// it (at least `wait_for_replicas`, which every call waits for).
    pub(super) async fn run_replicated(
        &self,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        now: u64,
        replicas: u32,
    ) -> Result<Vec<Decision>, RedisError> {
        self.guarded(self.call(mode, checks, now, replicas)).await
    }

    async fn call(
        &self,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        now: u64,
        replicas: u32,
    ) -> Result<Vec<Decision>, RedisError> {
        if let [(_, key, _)] = checks {
            // One key is one script, on a server or in a Cluster (the common call: no
            // grouping by slot to allocate).
            let keys = [self.redis_key(key)];
            let mut connection = self.connection().await?;
            return self
                .script_call(&mut connection, mode, checks, &keys, now, replicas)
                .await;
        }
        let keys: Vec<String> = checks
            .iter()
            .map(|(_, key, _)| self.redis_key(key))
            .collect();
        // One script when the keys can go together: always on one server, and on a Cluster
        // when they share a slot.
        let groups: Vec<Vec<usize>> = match &self.client {
            Client::Single(_) | Client::Sentinel(_) => vec![(0..checks.len()).collect()],
            Client::Cluster(_) => {
                // A slot's group found by its number, not by a walk of the groups so far: a
                // call of n keys over as many slots would otherwise cost n².
                let mut group_of: HashMap<u16, usize> = HashMap::new();
                let mut groups: Vec<Vec<usize>> = Vec::new();
                for (i, key) in keys.iter().enumerate() {
                    let s = slot::slot(key.as_bytes());
                    let g = *group_of.entry(s).or_insert_with(|| {
                        groups.push(Vec::new());
                        groups.len() - 1
                    });
                    groups[g].push(i);
                }
                groups
            }
        };
        let mut connection = self.connection().await?;
        if groups.len() <= 1 {
            return self
                .script_call(&mut connection, mode, checks, &keys, now, replicas)
                .await;
        }
        // Across slots a layered decision cannot be one script: reserve in each slot, and
        // if any slot says no, refund the slots that charged. Worst case, while a refund is
        // on its way, other requests see those keys short by this request's cost: the
        // error is always towards rejecting, never towards admitting more than the limit.
        let mut decisions = vec![None; checks.len()];
        let mut charged: Vec<&Vec<usize>> = Vec::new();
        let mut all_allowed = true;
        for group in &groups {
            let group_checks: Vec<(&Limit, &str, i128)> =
                group.iter().map(|&i| checks[i]).collect();
            let group_keys: Vec<String> = group.iter().map(|&i| keys[i].clone()).collect();
            let got = self
                .script_call(
                    &mut connection,
                    mode,
                    &group_checks,
                    &group_keys,
                    now,
                    replicas,
                )
                .await?;
            let allowed = got.iter().all(Decision::is_allowed);
            for (&i, d) in group.iter().zip(got) {
                decisions[i] = Some(d);
            }
            if mode == Mode::Decide {
                if allowed {
                    charged.push(group);
                } else {
                    all_allowed = false;
                }
            }
        }
        if mode == Mode::Decide && !all_allowed {
            for group in charged {
                let refund: Vec<(&Limit, &str, i128)> = group
                    .iter()
                    .map(|&i| (checks[i].0, checks[i].1, -checks[i].2))
                    .collect();
                let refund_keys: Vec<String> = group.iter().map(|&i| keys[i].clone()).collect();
                self.script_call(
                    &mut connection,
                    Mode::Settle,
                    &refund,
                    &refund_keys,
                    now,
                    replicas,
                )
                .await?;
            }
        }
        decisions
            .into_iter()
            .map(|d| d.ok_or_else(|| RedisError::Protocol("a check went undecided".to_owned())))
            .collect()
    }

    async fn script_call(
        &self,
        connection: &mut Connection,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        keys: &[String],
        now: u64,
        replicas: u32,
    ) -> Result<Vec<Decision>, RedisError> {
        if let (Some(one_check), [(limit, _, _)]) = (self.one_check(mode, checks, now), checks) {
            // Built straight into the command, sized once: no string per argument, no
            // buffer grown argument by argument.
            let data = 64
                + self.function.len()
                + keys.iter().map(String::len).sum::<usize>()
                + one_check.spec.len();
            let mut fcall = redis::Cmd::with_capacity(6 + keys.len(), data);
            fcall
                .arg("FCALL")
                .arg(self.function)
                .arg(keys.len())
                .arg(keys)
                .arg(one_check.spec.as_str());
            if let Some(now) = one_check.now {
                fcall.arg(now);
            }
            let reply: String = self.send(connection, &fcall, replicas).await?;
            let decision = encode::decode_one_check(&reply, limit, one_check.cost, one_check.now)
                .map_err(RedisError::Protocol)?;
            return Ok(vec![decision]);
        }
        if let Some(compact) = self.compact(mode, checks, now) {
            // Built straight into the command, sized once: no string per argument, no
            // buffer grown argument by argument.
            let data = 64
                + self.function.len()
                + keys.iter().map(String::len).sum::<usize>()
                + compact.spec.len();
            let mut fcall = redis::Cmd::with_capacity(7 + keys.len(), data);
            fcall
                .arg("FCALL")
                .arg(self.function)
                .arg(keys.len())
                .arg(keys);
            compact.push_to(&mut fcall);
            let reply: String = self.send(connection, &fcall, replicas).await?;
            let decision = encode::decode_compact(&reply).map_err(RedisError::Protocol)?;
            return Ok(vec![decision]);
        }
        let mut args: Vec<String> = Vec::with_capacity(3 + checks.len() * 8);
        args.push(mode.as_str().to_owned());
        args.push(self.time_arg(now));
        args.push(checks.len().to_string());
        for (limit, _, cost) in checks {
            encode::push_check(&mut args, limit, &cost.to_string(), now);
        }
        let reply: Vec<String> = self.invoke(connection, keys, &args, replicas).await?;
        let (_now, decisions) = encode::decode(&reply).map_err(RedisError::Protocol)?;
        if decisions.len() != checks.len() {
            return Err(RedisError::Protocol(format!(
                "{} decisions for {} checks",
                decisions.len(),
                checks.len()
            )));
        }
        Ok(decisions)
    }

    /// The one-check call (see `one_check.lua`), for a decide or a peek of one check of
    /// the algorithms it covers; `None` otherwise. One argument where the compact call has
    /// four, and a reply the script formats no number into: the state it read and its
    /// `now`, from which the core decides.
    pub(super) fn one_check(
        &self,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        now: u64,
    ) -> Option<OneCheck> {
        let decide = match mode {
            Mode::Decide => true,
            Mode::Peek => false,
            Mode::Settle => return None,
        };
        let [(limit, _, cost)] = checks else {
            return None;
        };
        let cost = u64::try_from(*cost).ok()?;
        Some(OneCheck {
            spec: encode::one_check_spec(decide, cost, limit, now)?,
            now: self.caller_time(now),
            cost,
        })
    }

    /// The compact call of one check (modes `decide1` and `peek1`, see `store.lua`), for a
    /// decide or a peek of one check whose algorithm the script's fast path knows; `None`
    /// otherwise. The store sends it for the algorithms the one-check call does not cover (the
    /// sliding window, quotas), and the one-check call hands to it what it declines. Five
    /// arguments fewer than the general form, each of which costs Redis a Lua string and the
    /// script a look-up; and the reply is one string.
    pub(super) fn compact(
        &self,
        mode: Mode,
        checks: &[(&Limit, &str, i128)],
        now: u64,
    ) -> Option<Compact> {
        let mode = match mode {
            Mode::Decide => "decide1",
            Mode::Peek => "peek1",
            Mode::Settle => return None,
        };
        let [(limit, _, cost)] = checks else {
            return None;
        };
        Some(Compact {
            mode,
            now: self.caller_time(now),
            cost: *cost,
            spec: encode::compact_spec(limit, now)?,
        })
    }
}

/// The arguments of a one-check call after its key: the check with its mode and cost, and the
/// caller's time (none for Redis's clock); the cost, to decide on the state the reply holds.
#[derive(Debug)]
pub(super) struct OneCheck {
    pub(super) spec: String,
    pub(super) now: Option<u64>,
    pub(super) cost: u64,
}

/// The arguments of a compact call after its key: the mode, the caller's time (empty for
/// Redis's clock), the cost, and the check's spec.
#[derive(Debug)]
pub(super) struct Compact {
    pub(super) mode: &'static str,
    pub(super) now: Option<u64>,
    pub(super) cost: i128,
    pub(super) spec: String,
}

impl Compact {
    /// Appends the arguments to `fcall` (numbers written by the client, with `itoa`).
    fn push_to(&self, fcall: &mut redis::Cmd) {
        fcall.arg(self.mode);
        match self.now {
            Some(now) => fcall.arg(now),
            None => fcall.arg(""),
        };
        fcall.arg(self.cost).arg(self.spec.as_str());
    }

    /// The same arguments as strings, for tools that send the call themselves.
    pub(super) fn strings(self) -> Vec<String> {
        vec![
            self.mode.to_owned(),
            self.now.map_or_else(String::new, |now| now.to_string()),
            self.cost.to_string(),
            self.spec,
        ]
    }
}
