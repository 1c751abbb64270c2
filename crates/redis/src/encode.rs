//! The store script's wire format on the Rust side: the arguments a [`Limit`] becomes, and
//! the decisions read back from a reply. `src/lua/store.lua` documents the whole protocol.
//!
//! Every number crosses the wire as a decimal string (the script does its arithmetic on
//! 144-bit integers of its own). Per check, the script reads the algorithm's name, the cost
//! (a signed delta for `settle`), the number of parameters and the parameters:
//!
//! | algorithm | parameters |
//! |---|---|
//! | `fixed-window`, `sliding-window`, `sliding-log` | limit, window_ns |
//! | `token-bucket`, `leaky-bucket`, `gcra` | ticks_per_ns, ticks_per_cell, burst |
//! | `leaky-queue` | ticks_per_ns, ticks_per_cell, capacity (burst + 1) |
//! | `quota` | limit, then `[start_ns, end_ns)` of the calendar periods around the caller's time |
//! | `concurrency` | max, lease_ns |
//!
//! where `ticks_per_ns = count / gcd(count, period_ns)` and
//! `ticks_per_cell = period_ns / gcd(count, period_ns)`, as the core scales time. For
//! `acquire` and `release`, the caller pushes the permit id before each check.

use ratewarden_core::{Algorithm, Decision, Limit, Outcome, Rate};

/// Appends one check to a script's arguments: the algorithm's name, `cost_or_delta` (a
/// decimal cost, or for `settle` a signed decimal delta), the number of parameters and the
/// parameters. `now_hint_ns` is the caller's own clock, from which a quota's calendar periods
/// are computed (the script picks the one holding its own `now`).
pub(crate) fn push_check(
    args: &mut Vec<String>,
    limit: &Limit,
    cost_or_delta: &str,
    now_hint_ns: u64,
) {
    let params = params(limit, now_hint_ns);
    args.reserve(3 + params.len());
    args.push(limit.kind().as_str().to_owned());
    args.push(cost_or_delta.to_owned());
    args.push(params.len().to_string());
    args.extend(params.iter().map(u64::to_string));
}

/// The script's parameters for `limit`.
fn params(limit: &Limit, now_hint_ns: u64) -> Vec<u64> {
    match limit {
        Limit::FixedWindow(a) => vec![a.limit(), duration_ns(a.window())],
        Limit::SlidingWindow(a) => vec![a.limit(), duration_ns(a.window())],
        Limit::SlidingLog(a) => vec![a.limit(), duration_ns(a.window())],
        Limit::TokenBucket(a) => ticks(a.rate(), a.burst()),
        Limit::LeakyBucket(a) => ticks(a.rate(), a.burst()),
        Limit::Gcra(a) => ticks(a.rate(), a.burst()),
        // The queue's capacity: the one request that goes at once, and `burst` waiting.
        Limit::LeakyQueue(a) => ticks(a.rate(), a.limit()),
        Limit::Quota(a) => {
            // The period holding the caller's time first (the script takes the first pair
            // holding its own `now`), then its neighbours, for a Redis clock a period away.
            let current = a.period_at(now_hint_ns);
            let mut params = vec![a.limit(), current.0, current.1];
            if let Some(before) = current.0.checked_sub(1) {
                let previous = a.period_at(before);
                params.extend([previous.0, previous.1]);
            }
            if current.1 < u64::MAX {
                let next = a.period_at(current.1);
                params.extend([next.0, next.1]);
            }
            params
        }
        Limit::Concurrency(a) => vec![a.limit(), duration_ns(a.lease())],
    }
}

/// A limit's duration in nanoseconds (the core keeps them below 2^64).
fn duration_ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `ticks_per_ns`, `ticks_per_cell` and a capacity, as the core's schedule and bucket use.
fn ticks(rate: Rate, capacity: u64) -> Vec<u64> {
    let (count, period) = (rate.count(), rate.period_ns());
    let g = gcd(count, period);
    vec![count / g, period / g, capacity]
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Reads a `decide`, `peek`, `settle` or `acquire` reply: the `now` the script used, then one
/// decision per check (outcome, value_ns, limit, remaining, reset_after_ns).
pub(crate) fn decode(reply: &[String]) -> Result<(u64, Vec<Decision>), String> {
    let (now, rest) = reply
        .split_first()
        .ok_or_else(|| "the script replied with nothing".to_owned())?;
    let now = number(now, "now")?;
    if rest.len() % 5 != 0 {
        return Err(format!(
            "the script replied with {} values after `now`, not 5 per check",
            rest.len()
        ));
    }
    let decisions = rest
        .chunks_exact(5)
        .map(|c| {
            let value = number(&c[1], "value_ns")?;
            let outcome = match c[0].as_str() {
                "allowed" => Outcome::Allowed,
                "delayed" => Outcome::Delayed { delay_ns: value },
                "limited" => Outcome::Limited {
                    retry_after_ns: value,
                },
                "cost_too_high" => Outcome::CostTooHigh,
                other => return Err(format!("the script replied with outcome `{other}`")),
            };
            Ok(Decision::new(
                outcome,
                number(&c[2], "limit")?,
                number(&c[3], "remaining")?,
                number(&c[4], "reset_after_ns")?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((now, decisions))
}

/// A decimal from the script, saturated to `u64` as the core saturates nanoseconds.
fn number(s: &str, what: &str) -> Result<u64, String> {
    s.parse::<u128>()
        .map(|n| u64::try_from(n).unwrap_or(u64::MAX))
        .map_err(|_| format!("the script replied with {what} `{s}`, not a decimal number"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewarden_core::{Gcra, LeakyQueue};

    #[test]
    fn rates_become_ticks() {
        let limit = Limit::from(Gcra::new(Rate::per_second(3).unwrap(), 4).unwrap());
        let mut args = Vec::new();
        push_check(&mut args, &limit, "1", 0);
        assert_eq!(args, ["gcra", "1", "3", "3", "1000000000", "4"]);
        let limit = Limit::from(LeakyQueue::new(Rate::per_second(5).unwrap(), 2).unwrap());
        let mut args = Vec::new();
        push_check(&mut args, &limit, "-2", 0);
        assert_eq!(args, ["leaky-queue", "-2", "3", "1", "200000000", "3"]);
    }

    #[test]
    fn replies_become_decisions() {
        let reply: Vec<String> = [
            "7", "delayed", "0", "3", "9", "5", "limited", "12", "3", "0", "1",
        ]
        .map(str::to_owned)
        .to_vec();
        let (now, d) = decode(&reply).unwrap();
        assert_eq!(now, 7);
        // A zero delay is allowed, and remaining is capped at the limit.
        assert_eq!(d[0], Decision::new(Outcome::Allowed, 3, 3, 5));
        assert_eq!(d[1].retry_after_ns(), Some(12));
        assert!(decode(&reply[..3]).is_err());
    }
}
