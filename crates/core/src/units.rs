//! Rates and durations as people write them, read exactly into integers.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

use crate::divisor::Divisor;
use crate::{Error, NANOS_PER_SEC};

/// A rate: `count` units per `period`, kept as an exact fraction.
///
/// The emission interval (`period / count`) is never rounded: algorithms scale time by
/// `count` instead, so `3/s` admits exactly 3 in any second, never a nanosecond early.
///
/// # Examples
///
/// ```
/// use ratewarden_core::Rate;
/// use std::time::Duration;
///
/// let rate: Rate = "1000/15m".parse()?;
/// assert_eq!(rate.count(), 1000);
/// assert_eq!(rate.period(), Duration::from_secs(900));
/// assert_eq!(Rate::per_second(50)?, "50/s".parse()?);
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: NonZeroU64,
    period_ns: NonZeroU64,
    /// `count / gcd`: scaled time units per nanosecond ("ticks").
    ticks_per_ns: Divisor,
    /// `period / gcd`: ticks per emission interval. For `5/s`, one tick is one nanosecond and
    /// an interval is 200,000,000 of them; for `3/s`, a tick is a third of a nanosecond.
    ticks_per_cell: Divisor,
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rate")
            .field("count", &self.count())
            .field("period_ns", &self.period_ns())
            .finish()
    }
}

impl Rate {
    /// `count` per `period`.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `count` or `period` is zero, [`Error::TooLarge`] when `period`
    /// does not fit in 64 bits of nanoseconds (about 584 years).
    pub fn new(count: u64, period: Duration) -> Result<Self, Error> {
        let count = NonZeroU64::new(count).ok_or(Error::Zero { field: "rate" })?;
        let period_ns = duration_ns(period, "rate")?;
        let period_ns = NonZeroU64::new(period_ns).ok_or(Error::Zero { field: "rate" })?;
        // Scaling time by the reduced fraction keeps numbers small, and for the common rates
        // (any count dividing the period) makes one tick exactly one nanosecond.
        let g = gcd(count.get(), period_ns.get());
        let reduce = |n: NonZeroU64| NonZeroU64::new(n.get() / g).unwrap_or(n);
        Ok(Self {
            count,
            period_ns,
            ticks_per_ns: Divisor::new(reduce(count)),
            ticks_per_cell: Divisor::new(reduce(period_ns)),
        })
    }

    /// `count` per second.
    ///
    /// # Errors
    ///
    /// [`Error::Zero`] when `count` is zero.
    pub fn per_second(count: u64) -> Result<Self, Error> {
        Self::new(count, Duration::from_secs(1))
    }

    /// How many units the rate allows per period.
    pub fn count(&self) -> u64 {
        self.count.get()
    }

    /// Ticks (the unit of scaled time) per nanosecond.
    pub(crate) fn ticks_per_ns(&self) -> Divisor {
        self.ticks_per_ns
    }

    /// Ticks per emission interval (`period / count` nanoseconds).
    pub(crate) fn ticks_per_cell(&self) -> Divisor {
        self.ticks_per_cell
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns.get())
    }

    /// The period in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        self.period_ns.get()
    }

    /// The time between two units at this rate, rounded down to a whole nanosecond. For
    /// display only: decisions never use the rounded value.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.period_ns.get() / self.count.get())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `50/s` rather than `50/1s`, but `1000/15m` as written.
        let period = DisplayDuration(self.period()).to_string();
        let period = match period.strip_prefix('1') {
            Some(unit) if unit.starts_with(|c: char| c.is_ascii_alphabetic()) => unit,
            _ => &period,
        };
        write!(f, "{}/{period}", self.count())
    }
}

impl FromStr for Rate {
    type Err = Error;

    fn from_str(input: &str) -> Result<Self, Error> {
        let err = |reason: &str| Error::Rate {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        let (count, period) = input
            .split_once('/')
            .ok_or_else(|| err("no `/` between the count and the period"))?;
        let count = count.trim().replace('_', "");
        let count: u64 = count
            .parse()
            .map_err(|_| err("the count before `/` is not a whole number"))?;
        let period = period.trim();
        // `50/s` means `50/1s`.
        let period = if period.starts_with(|c: char| c.is_ascii_digit()) {
            parse_duration(period)
        } else {
            parse_duration(&format!("1{period}"))
        }
        .map_err(|e| match e {
            Error::Duration { reason, .. } => err(&format!("period: {reason}")),
            other => other,
        })?;
        Rate::new(count, period).map_err(|e| err(&e.to_string()))
    }
}

/// A count of a rate's ticks (see [`Rate`]), 128 bits wide but stored as two 64-bit words so
/// that a state holding one stays 8-byte aligned: a store's per-key slot stays small.
///
/// # Examples
///
/// ```
/// use ratewarden_core::Ticks;
///
/// let t = Ticks::new(u128::from(u64::MAX) + 7);
/// assert_eq!(t.get(), u128::from(u64::MAX) + 7);
/// assert_eq!(Ticks::default().get(), 0);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Ticks {
    lo: u64,
    hi: u64,
}

impl Ticks {
    /// `value` ticks.
    #[inline]
    pub const fn new(value: u128) -> Self {
        Self {
            lo: value as u64,
            hi: (value >> 64) as u64,
        }
    }

    /// The count.
    #[inline]
    pub const fn get(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }
}

impl fmt::Debug for Ticks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn duration_ns(d: Duration, field: &'static str) -> Result<u64, Error> {
    u64::try_from(d.as_nanos()).map_err(|_| Error::TooLarge {
        field,
        reason: "durations are limited to 2^64 nanoseconds (about 584 years)".to_owned(),
    })
}

pub(crate) fn nonzero_duration_ns(d: Duration, field: &'static str) -> Result<NonZeroU64, Error> {
    NonZeroU64::new(duration_ns(d, field)?).ok_or(Error::Zero { field })
}

/// Reads a duration such as `200ms`, `1.5s`, `15m`, `1h` or `7d` exactly.
///
/// Units: `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`, `d`, `w`, and the words `sec`, `second`,
/// `min`, `minute`, `hour`, `day`, `week` (singular or plural). Decimals are exact: `0.1s` is
/// 100,000,000 ns, and a value finer than a nanosecond is an error rather than rounded.
///
/// # Errors
///
/// [`Error::Duration`] naming the input and what is wrong with it.
///
/// # Examples
///
/// ```
/// use ratewarden_core::parse_duration;
/// use std::time::Duration;
///
/// assert_eq!(parse_duration("15m")?, Duration::from_secs(900));
/// assert_eq!(parse_duration("1.5s")?, Duration::from_millis(1500));
/// assert!(parse_duration("15").is_err());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, Error> {
    let err = |reason: &str| Error::Duration {
        input: input.to_owned(),
        reason: reason.to_owned(),
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .ok_or_else(|| err("no unit"))?;
    let (number, unit) = s.split_at(split);
    if number.is_empty() {
        return Err(err("no number before the unit"));
    }
    let unit_ns: u64 = match unit.trim() {
        "ns" | "nanosecond" | "nanoseconds" => 1,
        "us" | "µs" | "microsecond" | "microseconds" => 1_000,
        "ms" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => NANOS_PER_SEC,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * NANOS_PER_SEC,
        "h" | "hr" | "hour" | "hours" => 3_600 * NANOS_PER_SEC,
        "d" | "day" | "days" => 86_400 * NANOS_PER_SEC,
        "w" | "week" | "weeks" => 7 * 86_400 * NANOS_PER_SEC,
        other => return Err(err(&format!("unknown unit `{other}`"))),
    };
    let ns = parse_decimal(number, unit_ns).map_err(|e| match e {
        Error::Number { reason, .. } => err(&reason),
        other => other,
    })?;
    Ok(Duration::from_nanos(ns))
}

/// Reads a non-negative decimal such as `0.70` and multiplies it by `scale`, exactly.
///
/// `parse_decimal("0.70", 1_000_000_000)` is 700,000,000: trace times in seconds become
/// nanoseconds without passing through a float. Underscores between digits are ignored.
///
/// # Errors
///
/// [`Error::Number`] when the text is not a decimal, when the product overflows `u64`, or when
/// it is not a whole number (finer than `1 / scale`).
///
/// # Examples
///
/// ```
/// use ratewarden_core::parse_decimal;
///
/// assert_eq!(parse_decimal("1.10", 1_000_000_000)?, 1_100_000_000);
/// assert!(parse_decimal("-1", 1).is_err());
/// # Ok::<(), ratewarden_core::Error>(())
/// ```
pub fn parse_decimal(input: &str, scale: u64) -> Result<u64, Error> {
    let err = |reason: &str| Error::Number {
        input: input.to_owned(),
        reason: reason.to_owned(),
    };
    let s = input.trim();
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |part: &str| -> Result<Vec<u8>, Error> {
        part.bytes()
            .filter(|&b| b != b'_')
            .map(|b| {
                if b.is_ascii_digit() {
                    Ok(b - b'0')
                } else {
                    Err(err("not a non-negative decimal number"))
                }
            })
            .collect()
    };
    let whole = digits(whole)?;
    let frac = digits(frac)?;
    if whole.is_empty() && frac.is_empty() {
        return Err(err("no digits"));
    }
    let too_big = || err("too large");
    let mut value: u128 = 0;
    for d in &whole {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u128::from(*d)))
            .ok_or_else(too_big)?;
        if value > u128::from(u64::MAX) {
            return Err(too_big());
        }
    }
    let mut total = value.checked_mul(u128::from(scale)).ok_or_else(too_big)?;
    // Each fractional digit contributes d * scale / 10^k, which must come out whole.
    let mut numerator: u128 = 0;
    let mut denominator: u128 = 1;
    for d in &frac {
        numerator = numerator * 10 + u128::from(*d);
        denominator *= 10;
        if denominator > 10u128.pow(30) {
            return Err(err("too many decimal places"));
        }
    }
    let scaled = numerator * u128::from(scale);
    if scaled % denominator != 0 {
        return Err(err(
            "more precise than the unit allows (nanoseconds at most)",
        ));
    }
    total += scaled / denominator;
    u64::try_from(total).map_err(|_| too_big())
}

/// Shows a duration the way people write it, in the largest unit that divides it: `1s`, `15m`,
/// `200ms`, `90s`.
///
/// # Examples
///
/// ```
/// use ratewarden_core::DisplayDuration;
/// use std::time::Duration;
///
/// assert_eq!(DisplayDuration(Duration::from_secs(900)).to_string(), "15m");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisplayDuration(pub Duration);

impl fmt::Display for DisplayDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        let units: [(u128, &str); 8] = [
            (7 * 86_400 * 1_000_000_000, "w"),
            (86_400 * 1_000_000_000, "d"),
            (3_600 * 1_000_000_000, "h"),
            (60 * 1_000_000_000, "m"),
            (1_000_000_000, "s"),
            (1_000_000, "ms"),
            (1_000, "us"),
            (1, "ns"),
        ];
        if ns == 0 {
            return write!(f, "0s");
        }
        for (size, name) in units {
            if ns % size == 0 {
                return write!(f, "{}{name}", ns / size);
            }
        }
        unreachable!("every duration is a whole number of nanoseconds")
    }
}

/// Shows a measured duration (a reset, a wait) for people: to the millisecond, rounded up, in
/// hours, minutes and seconds: `1m10.342s`, `2h0m5s`, `250ms`, `4us`.
///
/// [`DisplayDuration`] is exact, for durations written in a config; a measured one is rarely
/// a whole number of any unit, and exact it would read `70341385215ns`.
///
/// # Examples
///
/// ```
/// use ratewarden_core::ReadableDuration;
/// use std::time::Duration;
///
/// assert_eq!(ReadableDuration(Duration::from_nanos(70_341_385_215)).to_string(), "1m10.342s");
/// assert_eq!(ReadableDuration(Duration::from_millis(250)).to_string(), "250ms");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadableDuration(pub Duration);

impl fmt::Display for ReadableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        if ns == 0 {
            return write!(f, "0s");
        }
        if ns < 1_000_000 {
            return write!(f, "{}us", ns.div_ceil(1_000));
        }
        // Rounded up: a client told "retry in 1.999s" that retries then must not be early.
        let ms = ns.div_ceil(1_000_000);
        if ms < 1_000 {
            return write!(f, "{ms}ms");
        }
        let (secs, millis) = (ms / 1_000, ms % 1_000);
        let (hours, minutes, seconds) = (secs / 3_600, secs / 60 % 60, secs % 60);
        if hours > 0 {
            write!(f, "{hours}h{minutes}m")?;
        } else if minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        if millis == 0 {
            write!(f, "{seconds}s")
        } else {
            let fraction = format!("{millis:03}");
            write!(f, "{seconds}.{}s", fraction.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_durations_read_in_human_units() {
        let show = |ns: u64| ReadableDuration(Duration::from_nanos(ns)).to_string();
        assert_eq!(show(70_341_385_215), "1m10.342s");
        assert_eq!(show(70_000_000_000), "1m10s");
        assert_eq!(show(7_205_500_000_000), "2h0m5.5s");
        assert_eq!(show(999_000_001), "1s");
        assert_eq!(show(1_500_000), "2ms");
        assert_eq!(show(1_001), "2us");
        assert_eq!(show(0), "0s");
        assert_eq!(show(u64::MAX), "5124095h34m33.71s");
    }

    #[test]
    fn rates_read_like_people_write_them() {
        let r: Rate = "50/s".parse().unwrap();
        assert_eq!((r.count(), r.period_ns()), (50, NANOS_PER_SEC));
        let r: Rate = "1_000/15m".parse().unwrap();
        assert_eq!((r.count(), r.period_ns()), (1000, 900 * NANOS_PER_SEC));
        let r: Rate = "5 / hour".parse().unwrap();
        assert_eq!(r.period(), Duration::from_secs(3600));
        assert_eq!(r.to_string(), "5/h");
        assert_eq!("1000/15m".parse::<Rate>().unwrap().to_string(), "1000/15m");
        assert_eq!("7/10s".parse::<Rate>().unwrap().to_string(), "7/10s");
    }

    #[test]
    fn bad_rates_say_what_is_wrong() {
        let e = "50".parse::<Rate>().unwrap_err().to_string();
        assert!(e.contains("no `/`"), "{e}");
        let e = "0/s".parse::<Rate>().unwrap_err().to_string();
        assert!(e.contains("greater than zero"), "{e}");
        let e = "5/fortnight".parse::<Rate>().unwrap_err().to_string();
        assert!(e.contains("unknown unit `fortnight`"), "{e}");
        let e = "x/s".parse::<Rate>().unwrap_err().to_string();
        assert!(e.contains("whole number"), "{e}");
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse_decimal("0.70", NANOS_PER_SEC).unwrap(), 700_000_000);
        assert_eq!(parse_decimal("2.87", NANOS_PER_SEC).unwrap(), 2_870_000_000);
        assert_eq!(parse_decimal(".5", 10).unwrap(), 5);
        assert_eq!(parse_decimal("7", 1).unwrap(), 7);
        assert!(parse_decimal("0.0000000001", NANOS_PER_SEC).is_err());
        assert!(parse_decimal("1e3", 1).is_err());
        assert!(parse_decimal("", 1).is_err());
        assert!(parse_decimal("99999999999999999999", 1).is_err());
        assert!(parse_decimal("18446744073.709551616", NANOS_PER_SEC).is_err());
    }

    #[test]
    fn durations_round_trip_through_display() {
        for s in ["1s", "15m", "200ms", "1h", "6d", "2w", "3ns"] {
            let d = parse_duration(s).unwrap();
            assert_eq!(DisplayDuration(d).to_string(), s);
        }
        assert_eq!(
            DisplayDuration(parse_duration("90s").unwrap()).to_string(),
            "90s"
        );
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("10").is_err());
    }
}
