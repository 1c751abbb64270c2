//! The samples window: controllers that update once per window see the window's average.

use super::{Controller, Sample};

/// What a window of samples hands its controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aggregate {
    /// The average RTT of the window, in nanoseconds (rounded down).
    pub rtt_ns: u64,
    /// The standard error of `rtt_ns` (the samples' standard deviation over the square
    /// root of their count), in nanoseconds: how far the window's average may be from the
    /// upstream's by chance alone.
    pub rtt_error_ns: u64,
    /// The most requests in flight at any sample's start.
    pub max_in_flight: u64,
    /// Whether any sample was dropped.
    pub dropped: bool,
}

/// A controller updated once per window (Netflix's `WindowedLimit`).
pub trait WindowUpdate: std::fmt::Debug + Send {
    /// Updates the limit from one window's aggregate; returns the new limit.
    fn update(&mut self, window: Aggregate) -> u64;
    /// The current limit.
    fn limit(&self) -> u64;
}

/// Wraps a per-window controller: samples under `min_rtt` are ignored (a cache hit or an
/// error page says nothing of the upstream's queue), and the controller is updated once a
/// window holds at least `min_samples` samples and at least `min_time` has passed since the
/// last update (or the start). One sample is noise; a window's average is a measurement.
/// [`Windowed::round_trips`] also holds a window open for the last one's average RTT.
#[derive(Debug)]
pub struct Windowed<C> {
    inner: C,
    config: super::WindowConfig,
    /// When the window began: the last update, or the start.
    start: u64,
    count: u64,
    sum: u128,
    squares: u128,
    max_in_flight: u64,
    dropped: bool,
    /// The last window's average RTT.
    last_rtt_ns: u64,
    /// Whether a window lasts at least `last_rtt_ns` (unless it saw a drop).
    round_trips: bool,
}

impl<C: WindowUpdate> Windowed<C> {
    /// `inner`, updated once per window of `config`, the first window starting at `now`.
    pub fn new(inner: C, config: super::WindowConfig, now: u64) -> Self {
        Self {
            inner,
            config,
            start: now,
            count: 0,
            sum: 0,
            squares: 0,
            max_in_flight: 0,
            dropped: false,
            last_rtt_ns: 0,
            round_trips: false,
        }
    }

    /// A window also lasts at least the last one's average RTT, unless it saw a drop: one
    /// shorter than a round trip is answered by requests let in under the limit before the
    /// last, and a controller that doubles its limit each window (Gradient2's slow start)
    /// would run ahead of what it measures (on an upstream of 1 s, ten doublings in 100 ms
    /// windows before the first is seen). A drop is news to act on at once.
    #[must_use]
    pub fn round_trips(mut self) -> Self {
        self.round_trips = true;
        self
    }

    /// How long this window lasts at least.
    fn least_ns(&self) -> u64 {
        if self.round_trips && !self.dropped {
            self.config.min_time_ns.max(self.last_rtt_ns)
        } else {
            self.config.min_time_ns
        }
    }

    /// The controller inside.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C: WindowUpdate> Controller for Windowed<C> {
    fn sample(&mut self, now: u64, sample: Sample) -> u64 {
        // A drop is counted whatever its RTT: a fast 500 is still a failure.
        if sample.rtt_ns < self.config.min_rtt_ns && !sample.dropped {
            return self.inner.limit();
        }
        self.count += 1;
        self.sum += u128::from(sample.rtt_ns);
        self.squares = self
            .squares
            .saturating_add(u128::from(sample.rtt_ns) * u128::from(sample.rtt_ns));
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        self.dropped |= sample.dropped;
        if self.count < u64::from(self.config.min_samples)
            || now.saturating_sub(self.start) < self.least_ns()
        {
            return self.inner.limit();
        }
        let n = self.count as f64;
        let mean = self.sum as f64 / n;
        let variance = (self.squares as f64 / n - mean * mean).max(0.0);
        let window = Aggregate {
            rtt_ns: u64::try_from(self.sum / u128::from(self.count)).unwrap_or(u64::MAX),
            rtt_error_ns: (variance / n).sqrt() as u64,
            max_in_flight: self.max_in_flight,
            dropped: self.dropped,
        };
        self.start = now;
        self.last_rtt_ns = window.rtt_ns;
        self.count = 0;
        self.sum = 0;
        self.squares = 0;
        self.max_in_flight = 0;
        self.dropped = false;
        self.inner.update(window)
    }

    fn limit(&self) -> u64 {
        self.inner.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Aimd, AimdConfig, WindowConfig};
    use super::*;

    #[test]
    fn a_window_needs_enough_samples_and_enough_time_and_ignores_tiny_rtts() {
        let config = WindowConfig {
            min_samples: 3,
            min_time_ns: 1_000,
            min_rtt_ns: 100,
        };
        let aimd = Aimd::new(AimdConfig {
            initial: 10,
            min: 1,
            max: 100,
            ..AimdConfig::default()
        });
        let mut w = Windowed::new(aimd, config, 0);
        let busy = |rtt| Sample {
            rtt_ns: rtt,
            in_flight: 10,
            dropped: false,
        };
        // Tiny RTTs do not count towards the window.
        for t in 0..10 {
            assert_eq!(w.sample(t, busy(50)), 10);
        }
        assert_eq!(w.sample(0, busy(500)), 10);
        assert_eq!(w.sample(10, busy(500)), 10);
        // Three samples, but only 20 ns of window.
        assert_eq!(w.sample(20, busy(500)), 10);
        // Long enough now: one update, +1.
        assert_eq!(w.sample(1_000, busy(500)), 11);
        // A fresh window starts.
        assert_eq!(w.sample(1_001, busy(500)), 11);
    }

    #[test]
    fn a_round_trip_window_lasts_the_last_windows_rtt_unless_it_sees_a_drop() {
        let config = WindowConfig {
            min_samples: 1,
            min_time_ns: 10,
            min_rtt_ns: 0,
        };
        let aimd = Aimd::new(AimdConfig {
            initial: 10,
            min: 1,
            max: 100,
            ..AimdConfig::default()
        });
        let mut w = Windowed::new(aimd, config, 0).round_trips();
        let at = |rtt_ns, dropped| Sample {
            rtt_ns,
            in_flight: 10,
            dropped,
        };
        // The first window: 10 ns, one sample of 1,000 ns RTT; +1.
        assert_eq!(w.sample(10, at(1_000, false)), 11);
        // The next lasts at least that RTT: not at 500 ns on, but at 1,010.
        assert_eq!(w.sample(500, at(1_000, false)), 11);
        assert_eq!(w.sample(1_010, at(1_000, false)), 12);
        // A drop closes it after the least time alone: ×0.9.
        assert_eq!(w.sample(1_020, at(1_000, true)), 10);
    }
}
