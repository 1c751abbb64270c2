//! A limit built from an algorithm's name and its numbers, for config readers.
//!
//! The native TOML config, its local fallback (a limit divided among instances) and the
//! envoyproxy/ratelimit YAML reader all hold an algorithm picked at run time and a handful of
//! numbers; [`Limit::build`] is the one place that turns them into a [`Limit`], so which
//! algorithm takes which number, and the defaults, are written once.

use std::time::Duration;

use crate::{
    AlgorithmKind, CalendarUnit, Concurrency, Error, FixedWindow, Gcra, LeakyBucket, LeakyQueue,
    Limit, Quota, Rate, SlidingLog, SlidingWindow, TokenBucket,
};

/// A concurrency permit's lease when none is given: it outlives any sane request, and a
/// client that dies holding one gives it back within minutes.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(300);

/// A quota's time zone when none is given.
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// The numbers of a limit, by their names in config files. Each algorithm reads the ones it
/// takes ([`AlgorithmKind::fields`]) and ignores the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Numbers {
    /// `limit`: requests per window or period, or permits in flight.
    pub limit: Option<u64>,
    /// `window`: of the fixed and sliding windows.
    pub window: Option<Duration>,
    /// `rate`: of the buckets and GCRA.
    pub rate: Option<Rate>,
    /// `burst`: of the buckets and GCRA (for the leaky queue, how many may wait).
    pub burst: Option<u64>,
    /// `period`: a quota's calendar unit.
    pub period: Option<CalendarUnit>,
    /// `timezone`: a quota's IANA zone ([`DEFAULT_TIMEZONE`] when absent).
    pub timezone: Option<String>,
    /// `lease`: how long a concurrency permit lives ([`DEFAULT_LEASE`] when absent).
    pub lease: Option<Duration>,
    /// `sub_windows`: the slots a sliding window is split into (1, the two-window counter,
    /// when absent).
    pub sub_windows: Option<u32>,
}

impl AlgorithmKind {
    /// The numbers this algorithm takes, by their names in [`Numbers`] and in config files;
    /// every one is required except `timezone`, `lease` and `sub_windows`, which have
    /// defaults.
    pub fn fields(&self) -> &'static [&'static str] {
        match self {
            Self::FixedWindow | Self::SlidingLog => &["limit", "window"],
            Self::SlidingWindow => &["limit", "window", "sub_windows"],
            Self::TokenBucket | Self::LeakyBucket | Self::LeakyQueue | Self::Gcra => {
                &["rate", "burst"]
            }
            Self::Quota => &["limit", "period", "timezone"],
            Self::Concurrency => &["limit", "lease"],
        }
    }
}

impl Limit {
    /// A limit of algorithm `kind` with `numbers`.
    ///
    /// # Errors
    ///
    /// [`Error::Missing`] when a number `kind` requires is absent, and whatever the
    /// algorithm's own constructor refuses (a zero, an unknown time zone).
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_core::{AlgorithmKind, Limit, Numbers, Rate};
    ///
    /// let numbers = Numbers {
    ///     rate: Some(Rate::per_second(50)?),
    ///     burst: Some(100),
    ///     ..Numbers::default()
    /// };
    /// let limit = Limit::build(AlgorithmKind::Gcra, &numbers)?;
    /// assert_eq!(limit.kind(), AlgorithmKind::Gcra);
    /// assert_eq!(limit.numbers(), numbers);
    ///
    /// let missing = Limit::build(AlgorithmKind::FixedWindow, &numbers);
    /// assert_eq!(missing.unwrap_err().to_string(), "`fixed-window` needs `limit`");
    /// # Ok::<(), ratewarden_core::Error>(())
    /// ```
    pub fn build(kind: AlgorithmKind, numbers: &Numbers) -> Result<Limit, Error> {
        let need = |field: &'static str| Error::Missing {
            algorithm: kind.as_str(),
            field,
        };
        let limit = || numbers.limit.ok_or_else(|| need("limit"));
        let window = || numbers.window.ok_or_else(|| need("window"));
        let rate = || numbers.rate.ok_or_else(|| need("rate"));
        let burst = || numbers.burst.ok_or_else(|| need("burst"));
        Ok(match kind {
            AlgorithmKind::FixedWindow => FixedWindow::new(limit()?, window()?)?.into(),
            AlgorithmKind::SlidingLog => SlidingLog::new(limit()?, window()?)?.into(),
            AlgorithmKind::SlidingWindow => SlidingWindow::new(limit()?, window()?)?
                .with_sub_windows(numbers.sub_windows.unwrap_or(1))?
                .into(),
            AlgorithmKind::TokenBucket => TokenBucket::new(rate()?, burst()?)?.into(),
            AlgorithmKind::LeakyBucket => LeakyBucket::new(rate()?, burst()?)?.into(),
            AlgorithmKind::LeakyQueue => LeakyQueue::new(rate()?, burst()?)?.into(),
            AlgorithmKind::Gcra => Gcra::new(rate()?, burst()?)?.into(),
            AlgorithmKind::Quota => {
                let period = numbers.period.ok_or_else(|| need("period"))?;
                let zone = numbers.timezone.as_deref().unwrap_or(DEFAULT_TIMEZONE);
                Quota::new(limit()?, period, zone)?.into()
            }
            AlgorithmKind::Concurrency => {
                Concurrency::new(limit()?, numbers.lease.unwrap_or(DEFAULT_LEASE))?.into()
            }
        })
    }

    /// The numbers this limit was built from: [`Limit::build`] of them gives it back.
    pub fn numbers(&self) -> Numbers {
        use crate::Algorithm;
        let windowed = |limit: u64, window: Duration| Numbers {
            limit: Some(limit),
            window: Some(window),
            ..Numbers::default()
        };
        let bucket = |rate: Rate, burst: u64| Numbers {
            rate: Some(rate),
            burst: Some(burst),
            ..Numbers::default()
        };
        match self {
            Limit::FixedWindow(l) => windowed(l.limit(), l.window()),
            Limit::SlidingLog(l) => windowed(l.limit(), l.window()),
            Limit::SlidingWindow(l) => Numbers {
                sub_windows: (l.sub_windows() > 1).then_some(l.sub_windows()),
                ..windowed(l.limit(), l.window())
            },
            Limit::TokenBucket(l) => bucket(l.rate(), l.burst()),
            Limit::LeakyBucket(l) => bucket(l.rate(), l.burst()),
            Limit::LeakyQueue(l) => bucket(l.rate(), l.burst()),
            Limit::Gcra(l) => bucket(l.rate(), l.burst()),
            Limit::Quota(l) => Numbers {
                limit: Some(l.limit()),
                period: Some(l.unit()),
                timezone: Some(l.timezone().to_owned()),
                ..Numbers::default()
            },
            Limit::Concurrency(l) => Numbers {
                limit: Some(l.limit()),
                lease: Some(l.lease()),
                ..Numbers::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every algorithm's numbers build it back, so the local fallback (`numbers`, divided,
    /// `build`) keeps the algorithm and whatever it does not divide.
    #[test]
    fn numbers_round_trip_for_every_algorithm() {
        let numbers = Numbers {
            limit: Some(10),
            window: Some(Duration::from_secs(60)),
            rate: Some(Rate::per_second(5).unwrap()),
            burst: Some(7),
            period: Some(CalendarUnit::Day),
            timezone: Some("Europe/Paris".to_owned()),
            lease: Some(Duration::from_secs(9)),
            sub_windows: Some(6),
        };
        for kind in AlgorithmKind::ALL {
            let limit = Limit::build(kind, &numbers).unwrap();
            assert_eq!(limit.kind(), kind);
            assert_eq!(Limit::build(kind, &limit.numbers()).unwrap(), limit);
            for field in limit.numbers().fields() {
                assert!(kind.fields().contains(&field), "{kind}: {field}");
            }
        }
    }

    #[test]
    fn defaults_fill_timezone_and_lease() {
        let numbers = Numbers {
            limit: Some(3),
            period: Some(CalendarUnit::Month),
            ..Numbers::default()
        };
        let Limit::Quota(q) = Limit::build(AlgorithmKind::Quota, &numbers).unwrap() else {
            panic!("not a quota")
        };
        assert_eq!(q.timezone(), DEFAULT_TIMEZONE);
        let Limit::Concurrency(c) = Limit::build(AlgorithmKind::Concurrency, &numbers).unwrap()
        else {
            panic!("not a concurrency limit")
        };
        assert_eq!(c.lease(), DEFAULT_LEASE);
    }

    impl Numbers {
        fn fields(&self) -> Vec<&'static str> {
            [
                ("limit", self.limit.is_some()),
                ("window", self.window.is_some()),
                ("rate", self.rate.is_some()),
                ("burst", self.burst.is_some()),
                ("period", self.period.is_some()),
                ("timezone", self.timezone.is_some()),
                ("lease", self.lease.is_some()),
                ("sub_windows", self.sub_windows.is_some()),
            ]
            .into_iter()
            .filter_map(|(f, given)| given.then_some(f))
            .collect()
        }
    }
}
