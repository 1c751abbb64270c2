//! The store script's wire format on the Rust side: the arguments a [`Limit`] becomes, and
//! the decisions read back from a reply. `src/lua/store.lua` documents the whole protocol.
//!
//! Every number is sent as a decimal string (the script does its arithmetic on 144-bit
//! integers of its own, or in doubles when every number is small enough); a reply's numbers
//! are decimal strings, or integers from the fast path, which the client reads as strings. Per check, the script reads the algorithm's name, the cost
//! (a signed delta for `settle`), the number of parameters and the parameters:
//!
//! | algorithm | parameters |
//! |---|---|
//! | `fixed-window`, `sliding-window`, `sliding-log` | limit, window_ns |
//! | `sliding-window` of `N > 1` sub-windows | limit, window_ns, N |
//! | `token-bucket`, `leaky-bucket`, `gcra` | ticks_per_ns, ticks_per_cell, burst |
//! | `leaky-queue` | ticks_per_ns, ticks_per_cell, capacity (burst + 1) |
//! | `quota` | limit, then `[start_ns, end_ns)` of the calendar periods around the caller's time |
//! | `concurrency` | max, lease_ns |
//!
//! where `ticks_per_ns = count / gcd(count, period_ns)` and
//! `ticks_per_cell = period_ns / gcd(count, period_ns)`, as the core scales time. For
//! `acquire` and `release`, the caller pushes the permit id before each check.
//!
//! A decide or a peek of one check of an algorithm the script's fast path knows goes in a
//! compact form instead ([`compact_spec`]): the mode (`decide1`, `peek1`), `now`, the cost, and
//! the algorithm's name and parameters as one string separated by spaces; its reply is one
//! string of the decision's five values ([`decode_compact`]).

use ratewarden_core::algorithm::{FixedWindowState, GcraState, LeakyQueueState, TokenBucketState};
use ratewarden_core::{Algorithm, Decision, Limit, LimitState, Outcome, Rate, Ticks};

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
    let mut digits = itoa::Buffer::new();
    args.reserve(3 + params.len());
    args.push(limit.kind().as_str().to_owned());
    args.push(cost_or_delta.to_owned());
    args.push(digits.format(params.len()).to_owned());
    args.extend(params.iter().map(|&p| digits.format(p).to_owned()));
}

/// A check's spec for the compact call of one check (modes `decide1` and `peek1`): the
/// algorithm's name and its parameters, separated by spaces (`"gcra 1 1 100"`). `None` for
/// the algorithms the script's fast path does not know (the sliding log and concurrency,
/// whose states are lists): their calls take the general form, as the fast path would
/// decline them anyway.
pub(crate) fn compact_spec(limit: &Limit, now_hint_ns: u64) -> Option<String> {
    if matches!(limit, Limit::SlidingLog(_) | Limit::Concurrency(_)) {
        return None;
    }
    let params = params(limit, now_hint_ns);
    let mut spec = String::with_capacity(16 + params.len() * 20);
    spec.push_str(limit.kind().as_str());
    // Integers written by `itoa`, not `core::fmt`: this string is made for every decision.
    let mut digits = itoa::Buffer::new();
    for &p in params.iter() {
        spec.push(' ');
        spec.push_str(digits.format(p));
    }
    Some(spec)
}

/// The argument of a one-check call (`src/lua/one_check.lua`): `d` (decide) or `p` (peek),
/// the cost, the algorithm's name and its parameters, separated by spaces
/// (`"d 1 gcra 1 1 100"`). `None` for the algorithms the one-check call does not cover (all but
/// the fixed window, GCRA, the leaky queue and the buckets), whose calls take the compact
/// form of [`compact_spec`] or the general one.
pub(crate) fn one_check_spec(
    decide: bool,
    cost: u64,
    limit: &Limit,
    now_hint_ns: u64,
) -> Option<String> {
    if !matches!(
        limit,
        Limit::FixedWindow(_)
            | Limit::Gcra(_)
            | Limit::LeakyQueue(_)
            | Limit::TokenBucket(_)
            | Limit::LeakyBucket(_)
    ) {
        return None;
    }
    let params = params(limit, now_hint_ns);
    let mut spec = String::with_capacity(40 + params.len() * 20);
    spec.push_str(if decide { "d " } else { "p " });
    // Integers written by `itoa`, not `core::fmt`: this string is made for every decision.
    let mut digits = itoa::Buffer::new();
    spec.push_str(digits.format(cost));
    spec.push(' ');
    spec.push_str(limit.kind().as_str());
    for &p in params.iter() {
        spec.push(' ');
        spec.push_str(digits.format(p));
    }
    Some(spec)
}

/// Reads the reply of a one-check call of `cost` under `limit`: the state the script
/// read and the `now` it read it at, from which the core's transition makes the decision
/// (`caller_now` is the time the call gave, when it gave one); or, where the script's one-check
/// path declined, the five values of [`decode_compact`].
pub(crate) fn decode_one_check(
    reply: &str,
    limit: &Limit,
    cost: u64,
    caller_now: Option<u64>,
) -> Result<Decision, String> {
    let admitted = match reply.as_bytes().first() {
        Some(b'+') => true,
        Some(b'-') => false,
        _ => return decode_compact(reply),
    };
    let mut fields = reply[1..].splitn(3, ' ');
    let (Some(seconds), Some(micros), Some(value)) = (fields.next(), fields.next(), fields.next())
    else {
        return Err(format!("the script's reply `{reply}` has no state"));
    };
    let now = match caller_now {
        Some(now) if seconds.is_empty() && micros.is_empty() => now,
        _ => {
            let seconds: u64 = seconds
                .parse()
                .map_err(|_| format!("the script replied with seconds `{seconds}`"))?;
            let micros: u64 = micros
                .parse()
                .map_err(|_| format!("the script replied with microseconds `{micros}`"))?;
            seconds
                .checked_mul(1_000_000_000)
                .and_then(|ns| ns.checked_add(micros.checked_mul(1_000)?))
                .ok_or_else(|| format!("the script replied with a time past 2^64 ns: `{reply}`"))?
        }
    };
    let state = one_check_state(limit, value)
        .ok_or_else(|| format!("the script replied with a state it should not read: `{value}`"))?;
    let decision = limit.peek(&state, now, cost);
    if decision.is_allowed() != admitted {
        return Err(format!(
            "the script {} where the core {}: `{reply}`",
            if admitted { "admitted" } else { "refused" },
            if admitted { "refuses" } else { "admits" },
        ));
    }
    Ok(decision)
}

/// The state of a key's value as the one-check call reads it (`kind:state`, empty for no key).
fn one_check_state(limit: &Limit, value: &str) -> Option<LimitState> {
    if value.is_empty() {
        return Some(LimitState::Fresh);
    }
    let (kind, body) = value.split_once(':')?;
    if kind != limit.kind().as_str() {
        return None;
    }
    let pair = || {
        let (a, b) = body.split_once(',')?;
        Some((a.parse::<u128>().ok()?, b.parse::<u64>().ok()?))
    };
    Some(match limit {
        Limit::FixedWindow(_) => {
            let (window, count) = pair()?;
            LimitState::FixedWindow(FixedWindowState {
                window: u64::try_from(window).ok()?,
                count,
            })
        }
        Limit::Gcra(_) => LimitState::Gcra(GcraState {
            tat: Ticks::new(body.parse().ok()?),
        }),
        Limit::LeakyQueue(_) => LimitState::LeakyQueue(LeakyQueueState {
            drained_at: Ticks::new(body.parse().ok()?),
        }),
        Limit::TokenBucket(_) => {
            let (spent, last) = pair()?;
            LimitState::TokenBucket(TokenBucketState {
                spent: Ticks::new(spent),
                last,
            })
        }
        Limit::LeakyBucket(_) => {
            let (spent, last) = pair()?;
            LimitState::LeakyBucket(TokenBucketState {
                spent: Ticks::new(spent),
                last,
            })
        }
        _ => return None,
    })
}

/// A limit's parameters: at most seven (a quota's limit and three periods), kept on the
/// stack since they are made for every decision.
#[derive(Debug, Clone, Copy)]
struct Params {
    values: [u64; 7],
    len: usize,
}

impl Params {
    fn of(values: &[u64]) -> Self {
        let mut params = Params {
            values: [0; 7],
            len: 0,
        };
        params.extend(values);
        params
    }

    fn extend(&mut self, values: &[u64]) {
        self.values[self.len..self.len + values.len()].copy_from_slice(values);
        self.len += values.len();
    }
}

impl std::ops::Deref for Params {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        &self.values[..self.len]
    }
}

/// The script's parameters for `limit`.
fn params(limit: &Limit, now_hint_ns: u64) -> Params {
    match limit {
        Limit::FixedWindow(a) => Params::of(&[a.limit(), duration_ns(a.window())]),
        // One sub-window is the two-window counter, sent (and stored) as before they existed.
        Limit::SlidingWindow(a) if a.sub_windows() > 1 => Params::of(&[
            a.limit(),
            duration_ns(a.window()),
            u64::from(a.sub_windows()),
        ]),
        Limit::SlidingWindow(a) => Params::of(&[a.limit(), duration_ns(a.window())]),
        Limit::SlidingLog(a) => Params::of(&[a.limit(), duration_ns(a.window())]),
        Limit::TokenBucket(a) => ticks(a.rate(), a.burst()),
        Limit::LeakyBucket(a) => ticks(a.rate(), a.burst()),
        Limit::Gcra(a) => ticks(a.rate(), a.burst()),
        // The queue's capacity: the one request that goes at once, and `burst` waiting.
        Limit::LeakyQueue(a) => ticks(a.rate(), a.limit()),
        Limit::Quota(a) => {
            // The period holding the caller's time first (the script takes the first pair
            // holding its own `now`), then its neighbours, for a Redis clock a period away.
            let current = a.period_at(now_hint_ns);
            let mut params = Params::of(&[a.limit(), current.0, current.1]);
            if let Some(before) = current.0.checked_sub(1) {
                let previous = a.period_at(before);
                params.extend(&[previous.0, previous.1]);
            }
            if current.1 < u64::MAX {
                let next = a.period_at(current.1);
                params.extend(&[next.0, next.1]);
            }
            params
        }
        Limit::Concurrency(a) => Params::of(&[a.limit(), duration_ns(a.lease())]),
    }
}

/// A limit's duration in nanoseconds (the core keeps them below 2^64).
fn duration_ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `ticks_per_ns`, `ticks_per_cell` and a capacity, as the core's schedule and bucket use.
fn ticks(rate: Rate, capacity: u64) -> Params {
    let (count, period) = (rate.count(), rate.period_ns());
    let g = gcd(count, period);
    Params::of(&[count / g, period / g, capacity])
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
        .map(decode_one)
        .collect::<Result<Vec<_>, String>>()?;
    Ok((now, decisions))
}

/// Reads the reply of a compact call of one check (`decide1`, `peek1`): one string, the
/// decision's five values (outcome, value_ns, limit, remaining, reset_after_ns) separated by
/// spaces, without `now`.
pub(crate) fn decode_compact(reply: &str) -> Result<Decision, String> {
    let mut values = reply.split(' ');
    let mut next = |what: &str| {
        values
            .next()
            .ok_or_else(|| format!("the script's reply `{reply}` has no {what}"))
    };
    let five = [
        next("outcome")?,
        next("value_ns")?,
        next("limit")?,
        next("remaining")?,
        next("reset_after_ns")?,
    ];
    if values.next().is_some() {
        return Err(format!(
            "the script's reply `{reply}` has more than five values"
        ));
    }
    decode_one(&five)
}

/// One decision of a reply: outcome, value_ns, limit, remaining, reset_after_ns.
fn decode_one<S: AsRef<str>>(c: &[S]) -> Result<Decision, String> {
    let value = number(c[1].as_ref(), "value_ns")?;
    let outcome = match c[0].as_ref() {
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
        number(c[2].as_ref(), "limit")?,
        number(c[3].as_ref(), "remaining")?,
        number(c[4].as_ref(), "reset_after_ns")?,
    ))
}

/// A decimal from the script, saturated to `u64` as the core saturates nanoseconds.
fn number(s: &str, what: &str) -> Result<u64, String> {
    // Nearly every number fits in 64 bits; a larger one (the script's arithmetic is exact
    // past them) is read whole and saturates.
    s.parse::<u64>()
        .or_else(|_| {
            s.parse::<u128>()
                .map(|n| u64::try_from(n).unwrap_or(u64::MAX))
        })
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

    #[test]
    fn a_one_check_call_sends_one_argument_and_decides_on_the_state_it_reads() {
        let limit = Limit::from(Gcra::new(Rate::per_second(2).unwrap(), 2).unwrap());
        assert_eq!(
            one_check_spec(true, 1, &limit, 0).as_deref(),
            Some("d 1 gcra 1 500000000 2")
        );
        assert_eq!(
            one_check_spec(false, 3, &limit, 0).as_deref(),
            Some("p 3 gcra 1 500000000 2")
        );
        let window = Limit::from(
            ratewarden_core::SlidingWindow::new(3, std::time::Duration::from_secs(1)).unwrap(),
        );
        assert_eq!(
            one_check_spec(true, 1, &window, 0),
            None,
            "not a one-check algorithm"
        );
        // A key never seen at Redis's 7.5 s: one of two cells spent, the next in 0.5 s.
        let d = decode_one_check("+7 500000 ", &limit, 1, None).unwrap();
        assert_eq!(d, Decision::new(Outcome::Allowed, 2, 1, 500_000_000));
        // The state the script read (both cells taken until 8 s), at the caller's 7 s.
        let d = decode_one_check("-  gcra:8000000000", &limit, 1, Some(7_000_000_000)).unwrap();
        assert_eq!(d.retry_after_ns(), Some(500_000_000));
        // The five values where the script handed the check on.
        assert!(decode_one_check("allowed 0 2 1 5", &limit, 1, None).is_ok());
        for (reply, says) in [
            ("-7 500000 ", "refused where the core admits"),
            ("+7 500000 fixed-window:1,1", "should not read"),
            ("+7 500000 gcra:x", "should not read"),
            ("+7", "no state"),
            ("+x 5 ", "seconds `x`"),
            ("+18446744073709551615 0 ", "past 2^64"),
        ] {
            let e = decode_one_check(reply, &limit, 1, None).unwrap_err();
            assert!(e.contains(says), "`{reply}`: {e}");
        }
    }

    #[test]
    fn a_compact_call_sends_the_spec_and_reads_five_values() {
        let limit = Limit::from(Gcra::new(Rate::per_second(3).unwrap(), 4).unwrap());
        assert_eq!(
            compact_spec(&limit, 0).as_deref(),
            Some("gcra 3 1000000000 4")
        );
        let log = Limit::from(
            ratewarden_core::SlidingLog::new(3, std::time::Duration::from_secs(1)).unwrap(),
        );
        assert_eq!(
            compact_spec(&log, 0),
            None,
            "the fast path has no sliding log"
        );
        let d = decode_compact("limited 12 3 0 1").unwrap();
        assert_eq!(
            d,
            Decision::new(Outcome::Limited { retry_after_ns: 12 }, 3, 0, 1)
        );
        // The general reply (now first), a short one, a bad number: refused, saying why.
        for (reply, says) in [
            ("7 limited 12 3 0 1", "more than five"),
            ("allowed 0 3 1", "no reset_after_ns"),
            ("allowed 0 3 x 1", "remaining `x`"),
            ("", "no value_ns"),
        ] {
            let e = decode_compact(reply).unwrap_err();
            assert!(e.contains(says), "`{reply}`: {e}");
        }
    }

    /// Fuzzing (proptest; cargo-fuzz needs a nightly toolchain): the encoding of arbitrary
    /// limits and the decoding of arbitrary replies.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;
        use ratewarden_core::{
            CalendarUnit, Concurrency, FixedWindow, LeakyBucket, Quota, SlidingLog, SlidingWindow,
            TokenBucket,
        };
        use std::time::Duration;

        /// Any limit the core accepts, over the whole range of its numbers.
        fn limit() -> impl Strategy<Value = Limit> {
            let count = prop_oneof![1..10u64, any::<u64>()];
            let nanos = prop_oneof![1..1_000u64, any::<u64>()];
            let unit = prop_oneof![
                Just(CalendarUnit::Second),
                Just(CalendarUnit::Minute),
                Just(CalendarUnit::Hour),
                Just(CalendarUnit::Day),
                Just(CalendarUnit::Week),
                Just(CalendarUnit::Month),
            ];
            let zone = prop_oneof![Just("UTC"), Just("Europe/Paris"), Just("Asia/Kolkata")];
            (0..10u8, count.clone(), nanos, count, unit, zone).prop_filter_map(
                "the core refuses it",
                |(kind, n, ns, burst, unit, zone)| {
                    let d = Duration::from_nanos(ns);
                    let rate = Rate::new(n, d).ok()?;
                    Some(match kind {
                        0 => FixedWindow::new(n, d).ok()?.into(),
                        1 => SlidingWindow::new(n, d)
                            .ok()?
                            .with_sub_windows(1 + (burst % 60) as u32)
                            .unwrap_or(SlidingWindow::new(n, d).ok()?)
                            .into(),
                        2 => SlidingLog::new(n.min(1 << 20), d).ok()?.into(),
                        3 => TokenBucket::new(rate, burst).ok()?.into(),
                        4 => LeakyBucket::new(rate, burst).ok()?.into(),
                        5 => LeakyQueue::new(rate, burst).ok()?.into(),
                        6 => Gcra::new(rate, burst).ok()?.into(),
                        7 => Quota::new(n, unit, zone).ok()?.into(),
                        _ => Concurrency::new(n, d).ok()?.into(),
                    })
                },
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4096))]

            #[test]
            fn any_limit_encodes_to_decimal_parameters_the_script_can_read(
                limit in limit(),
                cost in any::<i64>(),
                hint in prop_oneof![any::<u64>(), 1_700_000_000_000_000_000..1_900_000_000_000_000_000u64],
            ) {
                let mut args = vec!["untouched".to_owned()];
                push_check(&mut args, &limit, &cost.to_string(), hint);
                prop_assert_eq!(&args[0], "untouched");
                prop_assert_eq!(args[1].as_str(), limit.kind().as_str());
                prop_assert_eq!(&args[2], &cost.to_string());
                let n: usize = args[3].parse().unwrap();
                prop_assert_eq!(args.len(), 4 + n);
                let params: Vec<u64> = args[4..]
                    .iter()
                    .map(|a| a.parse::<u64>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| TestCaseError::fail(format!("{args:?}: {e}")))?;
                match &limit {
                    Limit::TokenBucket(_) | Limit::LeakyBucket(_) | Limit::Gcra(_)
                    | Limit::LeakyQueue(_) => {
                        // ticks_per_ns / ticks_per_cell is the rate, in lowest terms.
                        let (per_ns, per_cell) = (params[0], params[1]);
                        prop_assert!(per_ns > 0 && per_cell > 0, "{:?}", params);
                        prop_assert_eq!(gcd(per_ns, per_cell), 1);
                    }
                    Limit::Quota(q) => {
                        // Pairs of [start, end): the first holds the hint, all are ordered
                        // and adjacent.
                        prop_assert_eq!(params[0], q.limit());
                        let periods: Vec<_> = params[1..].chunks(2).collect();
                        prop_assert!(periods.iter().all(|p| p.len() == 2 && p[0] < p[1]));
                        prop_assert!(periods[0][0] <= hint && hint < periods[0][1].max(hint.saturating_add(1)));
                    }
                    Limit::SlidingWindow(sw) if sw.sub_windows() > 1 => {
                        prop_assert_eq!(n, 3);
                        prop_assert_eq!(params[2], u64::from(sw.sub_windows()));
                    }
                    _ => prop_assert_eq!(n, 2),
                }
            }

            /// The compact spec is the general form's name and parameters, joined by spaces
            /// (both are written for every decision, by separate code).
            #[test]
            fn the_compact_spec_is_the_general_check_joined(
                limit in limit(),
                hint in prop_oneof![any::<u64>(), 1_700_000_000_000_000_000..1_900_000_000_000_000_000u64],
            ) {
                let mut args = Vec::new();
                push_check(&mut args, &limit, "1", hint);
                let joined = std::iter::once(&args[0]).chain(&args[3..]).cloned().collect::<Vec<_>>().join(" ");
                match compact_spec(&limit, hint) {
                    Some(spec) => prop_assert_eq!(spec, joined),
                    None => prop_assert!(matches!(limit, Limit::SlidingLog(_) | Limit::Concurrency(_))),
                }
            }

            /// A reply's number reads as it did through `u128` alone: exact below 2^64,
            /// saturated above, refused when it is not a decimal.
            #[test]
            fn a_number_reads_as_through_u128(
                text in prop_oneof![
                    any::<u64>().prop_map(|n| n.to_string()),
                    any::<u128>().prop_map(|n| n.to_string()),
                    "[-+0-9]{0,45}",
                ],
            ) {
                let through_u128 = text.parse::<u128>().map(|n| u64::try_from(n).unwrap_or(u64::MAX)).ok();
                prop_assert_eq!(number(&text, "n").ok(), through_u128);
            }

            #[test]
            fn any_one_check_reply_decodes_or_is_refused_without_a_panic(
                limit in limit(),
                reply in prop_oneof![
                    "[+-][0-9]{0,20} [0-9]{0,7} [a-z-]{0,14}:[0-9,]{0,45}",
                    any::<String>(),
                ],
                cost in any::<u64>(),
                now in prop::option::of(any::<u64>()),
            ) {
                if let Ok(d) = decode_one_check(&reply, &limit, cost, now) {
                    prop_assert!(d.remaining <= d.limit);
                }
            }

            #[test]
            fn any_reply_decodes_or_is_refused_without_a_panic(
                reply in prop::collection::vec(
                    prop_oneof![
                        Just("allowed".to_owned()),
                        Just("limited".to_owned()),
                        Just("delayed".to_owned()),
                        Just("cost_too_high".to_owned()),
                        any::<u64>().prop_map(|n| n.to_string()),
                        any::<u128>().prop_map(|n| n.to_string()),
                        "[-+0-9]{0,45}",
                        any::<String>(),
                    ],
                    0..24,
                ),
            ) {
                if let Ok((_, decisions)) = decode(&reply) {
                    prop_assert_eq!(decisions.len() * 5 + 1, reply.len());
                    for d in decisions {
                        prop_assert!(d.remaining <= d.limit);
                    }
                }
            }
        }
    }
}
